import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  GPT2_FAMILY,
  headSize,
  kvCacheBytesPerToken,
  kvHeads,
  kvWidth,
  parameterCount,
  PRESETS,
  readHFConfig,
  saveModel,
  weightBytes,
  type GPT2Config,
  loadModel,
  materializeWeights,
  parameterSpecs,
  randomWeights,
} from "../src/model/gpt2.ts";
import { numel, readSafetensors } from "../src/model/safetensors.ts";
import { expectUserError } from "./helpers/expect.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "gpt2-tiny");
const tmp = mkdtempSync(join(tmpdir(), "model-test-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("config", () => {
  test("presets are the released GPT-2 sizes", () => {
    const sizes = Object.values(PRESETS).map((c) => [
      c.name,
      c.n_layer,
      c.n_head,
      c.n_embd,
      c.n_positions,
      c.vocab_size,
    ]);
    expect(sizes).toEqual([
      ["gpt2", 12, 12, 768, 1024, 50257],
      ["gpt2-medium", 24, 16, 1024, 1024, 50257],
      ["gpt2-large", 36, 20, 1280, 1024, 50257],
      ["gpt2-xl", 48, 25, 1600, 1024, 50257],
    ]);
    for (const c of Object.values(PRESETS)) {
      expect(c.layer_norm_epsilon).toBe(1e-5);
      expect(headSize(c)).toBe(64);
    }
  });

  test("parameterCount is exact, with the tied output embedding counted once", () => {
    expect(parameterCount(PRESETS.gpt2!)).toBe(124_439_808);
    expect(parameterCount(PRESETS["gpt2-medium"]!)).toBe(354_823_168);
    expect(parameterCount(PRESETS["gpt2-large"]!)).toBe(774_030_080);
    expect(parameterCount(PRESETS["gpt2-xl"]!)).toBe(1_557_611_200);
    expect(weightBytes(PRESETS.gpt2!)).toBe(4 * 124_439_808);
    expect(weightBytes(PRESETS.gpt2!, 2)).toBe(2 * 124_439_808);
  });

  test("KV cache bytes per token", () => {
    expect(kvCacheBytesPerToken(PRESETS.gpt2!)).toBe(73_728); // 72 KiB fp32
    expect(kvCacheBytesPerToken(PRESETS.gpt2!, 2)).toBe(36_864); // 36 KiB fp16
  });

  test("reshaped to fewer K/V heads (profile --kv-heads): c_attn (C, C + 2 kv_C), counted exactly; no checkpoint of it", () => {
    const gpt2 = PRESETS.gpt2!;
    expect([kvHeads(gpt2), kvWidth(gpt2)]).toEqual([12, 768]);
    for (const k of [12, 4, 1]) {
      const cfg = GPT2_FAMILY.withKvHeads(gpt2, k);
      const kvC = k * 64;
      expect([kvHeads(cfg), kvWidth(cfg), headSize(cfg)]).toEqual([k, kvC, 64]);
      const specs = parameterSpecs(cfg);
      expect(specs.filter((p) => p.name.startsWith("h.5.attn.c_attn.")).map((p) => p.shape)).toEqual([
        [768, 768 + 2 * kvC],
        [768 + 2 * kvC],
      ]);
      expect(GPT2_FAMILY.linears(cfg)[0]).toEqual(["c_attn", 768, 768 + 2 * kvC]);
      expect(specs.reduce((n, p) => n + numel(p.shape), 0)).toBe(parameterCount(cfg));
      // each layer's c_attn loses (C + 1) weights and bias per k and v column dropped
      expect(parameterCount(gpt2) - parameterCount(cfg)).toBe(12 * 769 * 2 * (768 - kvC));
      expect(kvCacheBytesPerToken(cfg)).toBe(2 * 12 * kvC * 4);
    }
    expectUserError(
      () => saveModel(randomWeights(GPT2_FAMILY.withKvHeads(gpt2, 4), 0), join(tmp, "reshaped")),
      /^gpt2 reshaped to 4 K\/V heads of 12 has no form as a Hugging Face checkpoint: GPT-2's c_attn holds one K\/V head per query head there$/,
    );
  });

  test("readHFConfig reads the fixture", () => {
    expect(readHFConfig(FIXTURE)).toEqual({
      name: "gpt2-tiny",
      n_layer: 2,
      n_head: 2,
      n_embd: 128,
      n_positions: 64,
      vocab_size: 1001,
      layer_norm_epsilon: 1e-5,
    });
  });

  const base = JSON.parse(readFileSync(join(FIXTURE, "config.json"), "utf8")) as Record<string, unknown>;
  let configCount = 0;
  /** A directory holding only a config.json with `text`. */
  function configDir(text: string): string {
    const dir = join(tmp, `config-${configCount++}`);
    mkdirSync(dir);
    writeFileSync(join(dir, "config.json"), text);
    return dir;
  }
  const withKeys = (changes: Record<string, unknown>) => configDir(JSON.stringify({ ...base, ...changes }));

  test("readHFConfig: n_ctx stands in for n_positions; epsilon defaults to 1e-5", () => {
    const cfg = readHFConfig(withKeys({ n_positions: undefined, n_ctx: 32, layer_norm_epsilon: undefined }));
    expect(cfg.n_positions).toBe(32);
    expect(cfg.layer_norm_epsilon).toBe(1e-5);
    expect(readHFConfig(withKeys({ activation_function: "gelu_pytorch_tanh", n_inner: null })).n_embd).toBe(128);
  });

  test("readHFConfig rejects broken configs with the file named", () => {
    const cases: [string, RegExp][] = [
      ["{not json", /config\.json: not valid JSON/],
      ["[1, 2]", /config\.json: expected a JSON object/],
      [JSON.stringify({ ...base, n_layer: undefined }), /config\.json: missing n_layer/],
      [JSON.stringify({ ...base, n_positions: undefined, n_ctx: undefined }), /config\.json: missing n_ctx/],
      [JSON.stringify({ ...base, n_head: 0 }), /config\.json: n_head must be a positive integer, got 0/],
      [JSON.stringify({ ...base, n_embd: 12.5 }), /n_embd must be a positive integer, got 12\.5/],
      [JSON.stringify({ ...base, vocab_size: "1001" }), /vocab_size must be a positive integer, got "1001"/],
      [JSON.stringify({ ...base, n_head: 3 }), /n_embd 128 is not divisible by n_head 3/],
      [
        JSON.stringify({ ...base, activation_function: "relu" }),
        /activation_function "relu" is not supported \(only gelu_new/,
      ],
      [JSON.stringify({ ...base, model_type: "gpt_neo" }), /model_type is "gpt_neo", only "gpt2" is supported/],
      [JSON.stringify({ ...base, layer_norm_epsilon: -1 }), /layer_norm_epsilon must be a positive number/],
      [JSON.stringify({ ...base, n_inner: 256 }), /n_inner 256 is not supported/],
      [JSON.stringify({ ...base, tie_word_embeddings: false }), /tie_word_embeddings is false/],
    ];
    for (const [text, pattern] of cases) expectUserError(() => readHFConfig(configDir(text)), pattern);
    expectUserError(() => readHFConfig(tmp), /no config\.json in /);
  });
});

describe("loadModel on the gpt2-tiny fixture", () => {
  const w = loadModel(FIXTURE);
  const arrays = materializeWeights(w);
  const C = 128;

  test("every tensor has the shape the config implies", () => {
    expect(w.config.n_layer).toBe(2);
    const length = (name: string) => arrays.get(name)!.length;
    expect(length("wte.weight")).toBe(1001 * C);
    expect(length("wpe.weight")).toBe(64 * C);
    for (const l of [0, 1]) {
      for (const n of ["ln_1", "ln_2"])
        expect([length(`h.${l}.${n}.weight`), length(`h.${l}.${n}.bias`)]).toEqual([C, C]);
      expect([length(`h.${l}.attn.c_attn.weight`), length(`h.${l}.attn.c_attn.bias`)]).toEqual([C * 3 * C, 3 * C]);
      expect([length(`h.${l}.attn.c_proj.weight`), length(`h.${l}.attn.c_proj.bias`)]).toEqual([C * C, C]);
      expect([length(`h.${l}.mlp.c_fc.weight`), length(`h.${l}.mlp.c_fc.bias`)]).toEqual([C * 4 * C, 4 * C]);
      expect([length(`h.${l}.mlp.c_proj.weight`), length(`h.${l}.mlp.c_proj.bias`)]).toEqual([4 * C * C, C]);
    }
    expect([length("ln_f.weight"), length("ln_f.bias")]).toEqual([C, C]);
    let total = 0;
    for (const data of arrays.values()) total += data.length;
    expect(total).toBe(parameterCount(w.config));
    expect(w.source).toBe(join(FIXTURE, "model.safetensors"));
  });

  test("the two per-layer mask buffers are skipped and counted", () => {
    expect(w.skipped).toEqual({ tensors: 2, bytes: 2 * 64 * 64 * 4, names: ["h.0.attn.bias", "h.1.attn.bias"] });
  });

  test("values are the file's bytes", () => {
    const file = readSafetensors(join(FIXTURE, "model.safetensors"));
    const info = file.tensors.get("h.1.mlp.c_fc.weight")!;
    const bytes = readFileSync(join(FIXTURE, "model.safetensors"));
    const view = new DataView(bytes.buffer, bytes.byteOffset + file.dataStart + info.begin);
    const fc = arrays.get("h.1.mlp.c_fc.weight")!;
    for (const i of [0, 1, 777, fc.length - 1]) expect(fc[i]).toBe(view.getFloat32(4 * i, true));
  });

  test("streaming reuses one staging buffer: no copy of the model is made", () => {
    const buffers = new Set<ArrayBufferLike>();
    let elements = 0;
    for (const weights of [w, randomWeights(PRESETS.gpt2!, 0)]) {
      buffers.clear();
      elements = 0;
      weights.stream((_, chunk) => {
        buffers.add(chunk.buffer);
        elements += chunk.length;
      });
      expect(buffers.size).toBe(1);
      expect(elements).toBe(parameterCount(weights.config));
    }
  });

  test("parameter names match the checkpoint's, less the mask buffers", () => {
    const fileNames = [...readSafetensors(join(FIXTURE, "model.safetensors")).tensors.keys()];
    expect([...arrays.keys()].toSorted()).toEqual(fileNames.filter((n) => !w.skipped.names.includes(n)).toSorted());
    expect([...arrays.keys()]).toEqual(parameterSpecs(w.config).map((s) => s.name));
  });

  /** Copies the fixture with its tensor names rewritten by `rename`. */
  function renamedFixture(dirName: string, rename: (name: string) => string[]): string {
    const bytes = readFileSync(join(FIXTURE, "model.safetensors"));
    const headerLen = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString()) as Record<string, unknown>;
    const renamed = Object.fromEntries(
      Object.entries(header).flatMap(([n, v]) => (n === "__metadata__" ? [[n, v]] : rename(n).map((m) => [m, v]))),
    );
    const json = Buffer.from(JSON.stringify(renamed));
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    const dir = join(tmp, dirName);
    mkdirSync(dir);
    writeFileSync(join(dir, "config.json"), readFileSync(join(FIXTURE, "config.json")));
    writeFileSync(join(dir, "model.safetensors"), Buffer.concat([len, json, bytes.subarray(8 + headerLen)]));
    return dir;
  }

  test("names with the transformer. prefix load the same", () => {
    const prefixed = loadModel(renamedFixture("prefixed", (n) => [`transformer.${n}`]));
    expect(prefixed.skipped.names).toEqual(["h.0.attn.bias", "h.1.attn.bias"]);
    expect(materializeWeights(prefixed)).toEqual(arrays);
  });

  test("a tensor present both with and without the prefix is an error", () => {
    const rename: Record<string, string> = { "h.0.ln_1.bias": "ln_f.bias", "ln_f.bias": "transformer.ln_f.bias" };
    const dir = renamedFixture("both", (n) => [rename[n] ?? n]);
    expectUserError(
      () => loadModel(dir),
      /model\.safetensors: tensor ln_f\.bias appears both with and without the "transformer\." prefix/,
    );
  });
});

describe("randomWeights", () => {
  const small: GPT2Config = {
    name: "r",
    n_layer: 2,
    n_head: 4,
    n_embd: 64,
    n_positions: 128,
    vocab_size: 50257,
    layer_norm_epsilon: 1e-5,
  };
  const arraysOf = (seed?: number) => materializeWeights(randomWeights(small, seed));

  test("deterministic for a seed, different for another", () => {
    const a = arraysOf(1),
      b = arraysOf(1),
      c = arraysOf(2);
    expect(a).toEqual(b);
    expect(a.get("wte.weight")![0]).not.toBe(c.get("wte.weight")![0]);
    expect(a.get("wte.weight")!.slice(0, 100)).not.toEqual(c.get("wte.weight")!.slice(0, 100));
    expect(randomWeights(small, 1).source).toBe("random (seed 1)");
    expect(randomWeights(small).source).toBe("random (seed 0)");
  });

  test("the stream is pinned: changing the generator (or its chunking) changes these values", () => {
    const w = arraysOf(0);
    expect([...w.get("wte.weight")!.slice(0, 4)]).toEqual([
      -0.008531063795089722, 0.02219972014427185, 0.0004735018010251224, -0.027218827977776527,
    ]);
    // after wte's 3.2M values, streamed in chunks of 1M
    expect([...w.get("h.1.mlp.c_proj.weight")!.slice(0, 2)]).toEqual([-0.03386854752898216, 0.009359115734696388]);
  });

  test("N(0, 0.02) weights with normal tails; zero biases; LayerNorm 1 / 0", () => {
    const w = arraysOf(3);
    const x = w.get("wte.weight")!; // 3.2M samples
    let sum = 0,
      sumSq = 0,
      beyond = 0;
    for (const v of x) {
      sum += v;
      sumSq += v * v;
      if (Math.abs(v) > 3.5 * 0.02) beyond++;
    }
    const mean = sum / x.length;
    expect(Math.abs(mean)).toBeLessThan(1e-4);
    expect(Math.sqrt(sumSq / x.length - mean * mean)).toBeCloseTo(0.02, 4);
    expect(beyond / x.length).toBeCloseTo(4.65e-4, 4); // P(|z| > 3.5), exercising the ziggurat's tail
    for (const l of [0, 1]) {
      expect(w.get(`h.${l}.attn.c_attn.bias`)!.every((v) => v === 0)).toBe(true);
      expect(
        w.get(`h.${l}.ln_1.weight`)!.every((v) => v === 1) && w.get(`h.${l}.ln_1.bias`)!.every((v) => v === 0),
      ).toBe(true);
    }
    expect(w.get("ln_f.weight")!.every((v) => v === 1)).toBe(true);
    expect(randomWeights(small, 3).skipped).toEqual({ tensors: 0, bytes: 0, names: [] });
  });

  test("rejects a bad seed", () => {
    expectUserError(() => randomWeights(small, -1), /seed must be a non-negative integer, got -1/);
    expectUserError(() => randomWeights(small, 1.5), /seed must be a non-negative integer/);
  });
});
