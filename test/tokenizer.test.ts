import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { byteCodec, decodeTokens, encodeText, GPT2_VOCAB, parsePromptIds, textCodec } from "../src/model/tokenizer.ts";
import { expectUserError } from "./helpers/expect.ts";

describe("GPT-2 BPE", () => {
  const text = "Hello, I'm a language model,";
  const ids = [15496, 11, 314, 1101, 257, 3303, 2746, 11];

  test("encodes the classic prompt and decodes it back", () => {
    expect(encodeText(text)).toEqual(ids);
    expect(decodeTokens(ids)).toBe(text);
    expect(decodeTokens(ids, GPT2_VOCAB)).toBe(text);
  });

  test("<|endoftext|> is the special token 50256", () => {
    expect(encodeText("<|endoftext|>Hello")).toEqual([50256, 15496]);
    expect(encodeText("Hello<|endoftext|>")).toEqual([15496, 50256]);
    expect(decodeTokens([50256, 15496])).toBe("<|endoftext|>Hello");
  });

  test("an empty prompt is an error", () => {
    expectUserError(() => encodeText(""), /the prompt is empty/);
  });

  test("a non-GPT-2 vocabulary rejects text and shows ids", () => {
    expectUserError(() => encodeText(text, 1001), /vocabulary has 1001 tokens.*--prompt-ids/);
    expect(decodeTokens([5, 0, 1000], 1001)).toBe("<5><0><1000>");
  });
});

describe("parsePromptIds", () => {
  test("parses comma-separated ids, spaces allowed", () => {
    expect(parsePromptIds("1,2,3", 1001)).toEqual([1, 2, 3]);
    expect(parsePromptIds(" 464 , 3290,0 ", GPT2_VOCAB)).toEqual([464, 3290, 0]);
    expect(parsePromptIds("1000", 1001)).toEqual([1000]);
  });

  test("rejects empty lists, non-integers and out-of-vocabulary ids", () => {
    expectUserError(() => parsePromptIds("", 1001), /--prompt-ids is empty/);
    expectUserError(() => parsePromptIds("  ", 1001), /--prompt-ids is empty/);
    expectUserError(() => parsePromptIds("1,,2", 1001), /--prompt-ids: "" is not a token id/);
    expectUserError(() => parsePromptIds("1,2,", 1001), /--prompt-ids: "" is not a token id/);
    expectUserError(() => parsePromptIds("1.5", 1001), /--prompt-ids: "1\.5" is not a token id/);
    expectUserError(() => parsePromptIds("-1", 1001), /--prompt-ids: "-1" is not a token id/);
    expectUserError(() => parsePromptIds("abc", 1001), /"abc" is not a token id/);
    expectUserError(() => parsePromptIds("1e3", 1001), /"1e3" is not a token id/);
    expectUserError(
      () => parsePromptIds("5,1001", 1001),
      /token id 1001 is out of range for a vocabulary of 1001 \(0\.\.1000\)/,
    );
    expectUserError(
      () => parsePromptIds("99999999999999999999999", 1001),
      /token id 99999999999999999999999 is out of range/,
    );
  });
});

describe("a checkpoint's tokenizer.json (@huggingface/tokenizers)", () => {
  const dir = join(import.meta.dir, "fixtures/llama-tiny");
  const check = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8")).tokenizer_check;

  test("llama-tiny's tokenizer check: the text encodes to its ids and decodes back", () => {
    const codec = textCodec(dir, 1003)!;
    expect(codec.encode(check.text)).toEqual(check.ids);
    expect(codec.decode(check.ids)).toBe(check.text);
  });

  test("a malformed or missing tokenizer.json is one line; without one, a non-GPT-2 checkpoint has no text mapping", () => {
    const bad = mkdtempSync(join(tmpdir(), "tokenizer-"));
    try {
      writeFileSync(join(bad, "tokenizer.json"), "{ not json");
      expectUserError(() => textCodec(bad, 1003), /tokenizer\.json: not valid JSON/);
      writeFileSync(join(bad, "tokenizer.json"), JSON.stringify({ model: { type: "NoSuchModel" } }));
      expectUserError(() => textCodec(bad, 1003), /tokenizer\.json: not a tokenizer @huggingface\/tokenizers can read/);
      rmSync(join(bad, "tokenizer.json"));
      expect(textCodec(bad, 1003)).toBeNull();
      expect(textCodec(bad, GPT2_VOCAB)!.encode("Hello")).toEqual([15496]); // GPT-2 without a tokenizer.json
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  test("an id past the vocabulary is refused", () => {
    expectUserError(() => textCodec(dir, 500)!.encode(check.text), /outside the model's 500 tokens/);
  });
});

describe("seeded presets' byte-level vocabulary", () => {
  test("text is its UTF-8 bytes, and decodes back", () => {
    const codec = byteCodec(49152);
    expect(codec.encode("Hé")).toEqual([72, 195, 169]);
    expect(codec.decode([72, 195, 169, 40000])).toBe("Hé<40000>");
    expect(textCodec(undefined, 49152)!.source).toMatch(/byte-level/);
  });
});
