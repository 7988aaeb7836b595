/**
 * Text ↔ token ids: a checkpoint's own tokenizer.json (+ tokenizer_config.json) read by @huggingface/tokenizers,
 * GPT-2's byte-level BPE (r50k_base) for a GPT-2 vocabulary without one, a byte-level vocabulary of their own size
 * for seeded presets; and token ids given directly.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { decode, encode } from "gpt-tokenizer/encoding/r50k_base";
import { UserError } from "../errors.ts";
import { readSmallTextFile } from "./files.ts";

/** The vocabulary the GPT-2 tokenizer is defined for; other sizes (test fixtures) have no text mapping. */
export const GPT2_VOCAB = 50257;
export const END_OF_TEXT = "<|endoftext|>";
/** r50k's one special token, after the 50,256 byte-level ones */
export const END_OF_TEXT_ID = 50256;

/** Text → token ids; `<|endoftext|>` becomes its special token, as in GPT-2. */
export function encodeText(text: string, vocab = GPT2_VOCAB): number[] {
  if (vocab !== GPT2_VOCAB) {
    throw new UserError(
      `this model's vocabulary has ${vocab} tokens, not GPT-2's ${GPT2_VOCAB}, so a text prompt can't be tokenized; give token ids with --prompt-ids (e.g. --prompt-ids 1,2,3)`,
    );
  }
  const ids = text
    .split(END_OF_TEXT)
    .flatMap((part, i) => (i === 0 ? encode(part) : [END_OF_TEXT_ID, ...encode(part)]));
  if (ids.length === 0) throw new UserError("the prompt is empty: it encodes to no tokens");
  return ids;
}

/** Token ids → text; for a non-GPT-2 vocabulary each id is shown as `<id>`. */
export function decodeTokens(ids: readonly number[], vocab = GPT2_VOCAB): string {
  if (vocab !== GPT2_VOCAB) return ids.map((id) => `<${id}>`).join("");
  return decode(ids);
}

/** Parses `--prompt-ids` ("464,3290,318") into ids, each in [0, vocab). */
export function parsePromptIds(s: string, vocab: number): number[] {
  if (s.trim() === "") throw new UserError("--prompt-ids is empty: give comma-separated token ids, e.g. 464,3290");
  return s.split(",").map((part) => {
    const text = part.trim();
    if (!/^\d+$/.test(text)) {
      throw new UserError(
        `--prompt-ids: ${JSON.stringify(text)} is not a token id (expected comma-separated non-negative integers, e.g. 464,3290)`,
      );
    }
    const id = Number(text);
    if (id >= vocab)
      throw new UserError(
        `--prompt-ids: token id ${text} is out of range for a vocabulary of ${vocab} (0..${vocab - 1})`,
      );
    return id;
  });
}

/** A model's text mapping. */
export interface TextCodec {
  /** where it comes from, for the model's line */
  source: string;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

const MAX_TOKENIZER_BYTES = 64 << 20;

function jsonFile(path: string): object {
  const text = readSmallTextFile(path, MAX_TOKENIZER_BYTES);
  try {
    const value = JSON.parse(text);
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error("not a JSON object");
    return value;
  } catch (e) {
    throw new UserError(`${path}: not valid JSON (${(e as Error).message})`);
  }
}

/** The checkpoint's tokenizer.json (and tokenizer_config.json, when present), its ids checked against the vocabulary. */
export function hfTokenizer(dir: string, vocab: number): TextCodec {
  const path = join(dir, "tokenizer.json");
  const configPath = join(dir, "tokenizer_config.json");
  let tokenizer: Tokenizer;
  try {
    tokenizer = new Tokenizer(jsonFile(path), existsSync(configPath) ? jsonFile(configPath) : {});
  } catch (e) {
    if (e instanceof UserError) throw e;
    throw new UserError(`${path}: not a tokenizer @huggingface/tokenizers can read (${(e as Error).message})`);
  }
  return {
    source: path,
    encode(text) {
      const ids = tokenizer.encode(text).ids.map(Number);
      const bad = ids.find((id) => id >= vocab);
      if (bad !== undefined)
        throw new UserError(`${path}: the prompt encodes to token ${bad}, outside the model's ${vocab} tokens`);
      if (ids.length === 0) throw new UserError("the prompt is empty: it encodes to no tokens");
      return ids;
    },
    decode: (ids) => tokenizer.decode([...ids]),
  };
}

/** A generated vocabulary for seeded weights: ids 0..255 are the UTF-8 bytes, the rest show as `<id>`. */
export function byteCodec(vocab: number): TextCodec {
  if (vocab < 256) throw new UserError(`a byte-level vocabulary needs 256 tokens; this model has ${vocab}`);
  return {
    source: `a byte-level vocabulary of ${vocab} tokens (generated: seeded weights have no tokenizer)`,
    encode(text) {
      const ids = Array.from(new TextEncoder().encode(text));
      if (ids.length === 0) throw new UserError("the prompt is empty: it encodes to no tokens");
      return ids;
    },
    decode: (ids) => {
      const bytes: number[] = [];
      let out = "";
      const flush = () => {
        out += new TextDecoder().decode(Uint8Array.from(bytes));
        bytes.length = 0;
      };
      for (const id of ids) {
        if (id < 256) bytes.push(id);
        else {
          flush();
          out += `<${id}>`;
        }
      }
      flush();
      return out;
    },
  };
}

/**
 * The text mapping of a model: its checkpoint's tokenizer.json when it has one; else GPT-2's BPE for GPT-2's
 * vocabulary, a byte-level vocabulary for seeded weights, or none (null: only --prompt-ids).
 */
export function textCodec(dir: string | undefined, vocab: number): TextCodec | null {
  if (dir && existsSync(join(dir, "tokenizer.json"))) return hfTokenizer(dir, vocab);
  if (vocab === GPT2_VOCAB)
    return { source: "GPT-2's BPE (r50k_base)", encode: (t) => encodeText(t), decode: (ids) => decodeTokens(ids) };
  return dir ? null : byteCodec(vocab);
}
