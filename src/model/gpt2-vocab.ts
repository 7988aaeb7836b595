/**
 * GPT-2's byte-level BPE vocabulary as Hugging Face's vocab.json / merges.txt spell it, rebuilt from the
 * r50k_base ranks that gpt-tokenizer ships (rank = token id; each entry is the token's bytes).
 *   token text: each byte through GPT-2's bytes_to_unicode table (a space is "Ġ", a newline "Ċ")
 *   merges: for each non-byte token in rank order, the two tokens BPE joins to make it — found by running
 *           BPE on the token's bytes with only the lower ranks allowed (as tiktoken → Hugging Face converters do)
 */
import bpeRanks from "gpt-tokenizer/bpeRanks/r50k_base";

import { END_OF_TEXT } from "./tokenizer.ts";

/** GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards. */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let next = 256;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : next++));
})();

const utf8 = new TextEncoder();

/** The bytes of rank `r`: a string entry is UTF-8 text, an array entry raw bytes (not valid UTF-8 alone). */
function tokenBytes(r: number): Uint8Array {
  const entry = bpeRanks[r]!;
  return typeof entry === "string" ? utf8.encode(entry) : Uint8Array.from(entry);
}

const asKey = (bytes: Uint8Array) => String.fromCharCode(...bytes); // one char per byte: a map key
const asText = (bytes: Uint8Array) => Array.from(bytes, (b) => BYTE_TO_CHAR[b]).join("");

export interface ByteLevelVocab {
  /** token texts, id order */
  tokens: string[];
  /** "left right" pairs in merge order (the rank of the token they make) */
  merges: string[];
}

let cached: ByteLevelVocab | undefined;

/** The full r50k vocabulary: 50,256 byte-level tokens + <|endoftext|>, and the 50,000 merges. */
export function gpt2Vocab(): ByteLevelVocab {
  if (cached) return cached;
  const bytes = Array.from({ length: bpeRanks.length }, (_, r) => tokenBytes(r));
  const rankOf = new Map(bytes.map((b, r) => [asKey(b), r]));
  const merges: string[] = [];
  for (let r = 0; r < bytes.length; r++) {
    if (bytes[r]!.length < 2) continue; // the 256 single bytes are not merges
    const [left, right] = lastMerge(bytes[r]!, r, rankOf);
    merges.push(`${asText(left)} ${asText(right)}`);
  }
  cached = { tokens: [...bytes.map(asText), END_OF_TEXT], merges };
  return cached;
}

/** BPE over `token`'s bytes using only ranks below `maxRank`; the two parts left are the merge that made it. */
function lastMerge(token: Uint8Array, maxRank: number, rankOf: Map<string, number>): [Uint8Array, Uint8Array] {
  let parts: Uint8Array[] = Array.from(token, (b) => Uint8Array.of(b));
  while (parts.length > 2) {
    let best = -1;
    let bestRank = maxRank;
    for (let i = 0; i + 1 < parts.length; i++) {
      const rank = rankOf.get(asKey(concat(parts[i]!, parts[i + 1]!)));
      if (rank !== undefined && rank < bestRank) [best, bestRank] = [i, rank];
    }
    if (best < 0) break;
    parts = [...parts.slice(0, best), concat(parts[best]!, parts[best + 1]!), ...parts.slice(best + 2)];
  }
  if (parts.length !== 2) throw new Error(`r50k rank ${maxRank} is not one merge of two lower-ranked tokens`);
  return [parts[0]!, parts[1]!];
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
