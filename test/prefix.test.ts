// Prompt caching (run/prefix.ts): a kept prefix restored into a poisoned cache and only the suffix prefilled gives
// the cold prefill's logits and tokens, for GPT-2 and a Llama-family model in each cache dtype; the file round-trips
// its rows, and every malformed, truncated or foreign file is refused with one line naming what is wrong.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { UserError } from "../src/errors.ts";
import { loadAnyModel, type ModelWeights } from "../src/model/architectures.ts";
import { randomWeights } from "../src/model/gpt2.ts";
import type { DtypeName } from "../src/ops.ts";
import { promptOf } from "../src/profile/prompts.ts";
import {
  checkPrefixIdentity,
  encodePrefix,
  keepPrefix,
  prefixIdentityOf,
  readPrefixFile,
  restorePrefix,
  reusedRows,
  type KeptPrefix,
} from "../src/run/prefix.ts";
import { Session } from "../src/run/session.ts";
import { maxRelativeError } from "../src/verify/compare.ts";

const cpu = CpuBackend.open();
const dir = mkdtempSync(join(tmpdir(), "prefix-test-"));
afterAll(() => {
  cpu.close();
  rmSync(dir, { recursive: true, force: true });
});

const POISON = 0x7fc07fc0; // a NaN as fp32, and two NaNs as bf16 or f16 halves
const PREFIX = 37;
const SUFFIX = 11;
const NEW_TOKENS = 6;
const gpt2 = randomWeights({
  name: "gpt2-prefix",
  n_layer: 2,
  n_head: 2,
  n_embd: 64,
  n_positions: 128,
  vocab_size: 97,
  layer_norm_epsilon: 1e-5,
});
const MODELS: [string, ModelWeights][] = [
  ["gpt2", gpt2],
  ["llama-tiny", loadAnyModel(join(import.meta.dir, "fixtures/llama-tiny"))],
];

const sessionOf = (weights: ModelWeights, kv: DtypeName) =>
  new Session(cpu, weights, { form: { plan: "fused", batch: 1, weights: "f32", kv }, maxContext: 64 });

/** The logits after the prompt's step and the greedy tokens after it. */
function generateAfter(s: Session<ModelWeights>, start: () => void, length: number) {
  start();
  const logits = Float32Array.from(s.readLogits());
  for (let i = 1; i < NEW_TOKENS; i++) s.run(1);
  return { logits, tokens: s.readSequence(length + NEW_TOKENS).slice(length) };
}

describe("a kept prefix restored gives the cold prefill's logits and tokens", () => {
  for (const [name, weights] of MODELS)
    for (const kv of ["f32", "bf16", "f16"] as DtypeName[])
      test(`${name}, ${kv} cache: from memory and from a file`, () => {
        const prompt = promptOf(PREFIX + SUFFIX, weights.config.vocab_size, 5);
        const earlier = sessionOf(weights, kv);
        const identity = prefixIdentityOf(earlier);
        const cold = generateAfter(earlier, () => earlier.prefill(prompt), prompt.length);
        // the earlier request's prefix, kept after it generated (its rows past the prompt do not matter)
        const kept = keepPrefix(cpu, earlier.sequenceCache(0), identity, prompt.slice(0, PREFIX));
        earlier.close();
        const file = join(dir, `${name}-${kv}.prefix`);
        writeFileSync(file, encodePrefix(kept));
        const read = readPrefixFile(file);
        expect(read.rows).toEqual(kept.rows);
        expect(read.tokens).toEqual(prompt.slice(0, PREFIX));
        for (const prefix of [kept, read]) {
          const warm = sessionOf(weights, kv);
          checkPrefixIdentity(prefix, prefixIdentityOf(warm), file);
          cpu.fill32(warm.resident.allocations.cache, POISON); // a row not restored or not prefilled is NaN
          const rows = reusedRows(prompt, prefix, file);
          expect(rows).toBe(PREFIX);
          const out = generateAfter(
            warm,
            () => {
              restorePrefix(cpu, warm.sequenceCache(0), prefix, rows);
              warm.prefill(prompt, 0, rows);
            },
            prompt.length,
          );
          expect(out.logits.every(Number.isFinite)).toBe(true);
          expect(maxRelativeError(out.logits, cold.logits)).toBeLessThanOrEqual(1e-4);
          expect(out.tokens).toEqual(cold.tokens);
          warm.close();
        }
      });
});

describe("which rows a prompt reuses", () => {
  const prefix = { tokens: [5, 6, 7] } as KeptPrefix;
  test("all of them, or all but the last when the prompt is the prefix", () => {
    expect(reusedRows([5, 6, 7, 8, 9], prefix, "p")).toBe(3);
    expect(reusedRows([5, 6, 7], prefix, "p")).toBe(2);
  });
  test("a prompt that does not begin with the prefix is one line naming the token", () => {
    expect(() => reusedRows([5, 9, 7, 8], prefix, "p")).toThrow(
      "the prompt does not begin with the 3-token prefix of p: token 2 is 9, the prefix's is 6",
    );
    expect(() => reusedRows([5, 6], prefix, "p")).toThrow("the prompt (2 tokens) is shorter than the 3-token prefix");
    expect(() => reusedRows([5], prefix, "p")).toThrow("the prompt (1 token) is shorter than the 3-token prefix");
  });
});

describe("a prefix file that is not whole, not one, or not this model's", () => {
  const s = sessionOf(gpt2, "f32");
  const identity = prefixIdentityOf(s);
  s.prefill(promptOf(9, 97, 1));
  const kept = keepPrefix(cpu, s.sequenceCache(0), identity, promptOf(9, 97, 1));
  s.close();
  const bytes = encodePrefix(kept);
  const refusal = (data: Uint8Array) => {
    const file = join(dir, "bad.prefix");
    writeFileSync(file, data);
    try {
      readPrefixFile(file);
    } catch (e) {
      expect(e).toBeInstanceOf(UserError);
      return (e as Error).message;
    }
    return "read";
  };
  const headerOf = (data: Uint8Array) => {
    const n = new DataView(data.buffer).getUint32(8, true);
    return { n, json: JSON.parse(new TextDecoder().decode(data.subarray(12, 12 + n))) };
  };
  /** the file with its header's JSON replaced (its rows kept) */
  const withHeader = (edit: (h: Record<string, unknown>) => void) => {
    const { n, json } = headerOf(bytes);
    edit(json);
    const text = new TextEncoder().encode(JSON.stringify(json).padEnd(n));
    if (text.length !== n) throw new Error("the edited header must keep its length");
    const out = Uint8Array.from(bytes);
    out.set(text, 12);
    return out;
  };

  test("cut anywhere: truncated, one line", () => {
    for (const cut of [11, 40, bytes.length - kept.rows.length, bytes.length - 1])
      expect(refusal(bytes.subarray(0, cut))).toMatch(/is truncated|is not a prefix file/);
    expect(refusal(bytes.subarray(0, bytes.length - 1))).toContain(
      `is truncated: ${bytes.length - 1} bytes of the ${bytes.length} its header describes`,
    );
  });
  test("bytes after the rows, another file, a broken header", () => {
    expect(refusal(new Uint8Array([...bytes, 0]))).toContain("has 1 bytes after the rows its header describes");
    expect(refusal(readFileSync(join(import.meta.dir, "fixtures/llama-tiny/config.json")))).toContain(
      "is not a prefix file (written by generate --save-prefix)",
    );
    expect(refusal(withHeader((h) => (h.layers = 3)))).toContain("its header's layers is not the config's n_layer");
    expect(refusal(withHeader((h) => (h.kv_dtype = "f64")))).toContain("kv_dtype is not f32, bf16 or f16");
    expect(refusal(withHeader((h) => (h.tokens = [])))).toContain("tokens are not a list of token ids");
    expect(refusal(withHeader((h) => (h.weights_sha256 = "0")))).toContain("weights_sha256 is not a sha256");
    expect(refusal(withHeader((h) => (h.file_sha256 = "0")))).toContain("file_sha256 is not a sha256");
    expect(refusal(withHeader((h) => delete (h.config as Record<string, unknown>).layer_norm_epsilon))).toContain(
      "its header's config is no model this project runs",
    );
  });
  test("rows or header changed after writing (a flipped bit, NaN, a token edited) are refused; earlier formats ask to save again", () => {
    const rowsAt = bytes.length - kept.rows.length;
    const flipped = Uint8Array.from(bytes);
    flipped[rowsAt + 5] = flipped[rowsAt + 5]! ^ 1;
    const changed = "its header or rows are not the ones written (their sha256 differs from the header's file_sha256)";
    expect(refusal(flipped)).toContain(changed);
    const nan = Uint8Array.from(bytes);
    new DataView(nan.buffer).setFloat32(bytes.length - 4, Number.NaN, true);
    expect(refusal(nan)).toContain(changed);
    // a token edited in the header: the rows would be restored for a prompt they were not computed from
    expect(refusal(withHeader((h) => ((h.tokens as number[])[0] = ((h.tokens as number[])[0]! + 1) % 10)))).toContain(
      changed,
    );
    const file = join(dir, "flipped.prefix");
    writeFileSync(file, flipped);
    expect(readPrefixFile(file, { checkHash: false }).rows).toEqual(flipped.subarray(rowsAt)); // its writer's own file
    for (const magic of ["DFPREFX1", "DFPREFX2"]) {
      const earlier = Uint8Array.from(bytes);
      earlier.set(new TextEncoder().encode(magic), 0);
      expect(refusal(earlier)).toContain(`was written by an earlier generate --save-prefix (${magic}`);
    }
    expect(refusal(bytes)).toBe("read");
  });
  test("another model, cache dtype, weight dtype or weights: one line naming which", () => {
    const other = (change: Partial<typeof identity>) => () =>
      checkPrefixIdentity(kept, { ...identity, ...change }, "p.prefix");
    expect(other({ config: { ...gpt2.config, n_embd: 128 } })).toThrow(
      "p.prefix was saved from another model: its config's n_embd is 64, this model's 128",
    );
    const llama = MODELS.find(([name]) => name === "llama-tiny")![1].config;
    expect(other({ config: llama })).toThrow(
      `p.prefix was saved from another model: a gpt2 model (${gpt2.config.name}), and this is a llama model (${llama.name})`,
    );
    expect(other({ kv_dtype: "bf16" })).toThrow("p.prefix holds a f32 cache; this run's cache is bf16");
    expect(other({ weights_dtype: "f16" })).toThrow("p.prefix was saved with f32 weights; this run's are f16");
    expect(other({ weights_sha256: "0".repeat(64) })).toThrow("p.prefix was saved from other weights");
    // a config's name is its folder's: the same checkpoint moved keeps its prefixes
    expect(other({ config: { ...identity.config, name: "moved-elsewhere" } })).not.toThrow();
    const seeded = sessionOf(randomWeights(gpt2.config, 1), "f32");
    expect(() => checkPrefixIdentity(kept, prefixIdentityOf(seeded), "p.prefix")).toThrow(
      "p.prefix was saved from other weights",
    );
    seeded.close();
  });
});
