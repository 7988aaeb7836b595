/** GPT-2 byte-level BPE (r50k_base), and token ids given directly for models with another vocabulary. */
import { decode, encode } from "gpt-tokenizer/encoding/r50k_base";
import { UserError } from "../errors.ts";

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
