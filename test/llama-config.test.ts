// The Llama family's config.json and checkpoint rules: each bad input is one line naming the key, tensor or file.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { checkHostMemory, parseContexts } from "../src/cli/common.ts";
import { loadAnyModel, positionsLimitOf } from "../src/model/architectures.ts";
import { checkPositions } from "../src/run/generate.ts";
import {
  inverseFrequencies,
  LLAMA_PRESETS,
  llamaConfigOf,
  llamaParameterCount,
  saveLlamaModel,
  type LlamaWeights,
} from "../src/model/llama.ts";
import { expectUserError } from "./helpers/expect.ts";

const FIXTURE = join(import.meta.dir, "fixtures/llama-tiny");
const config = JSON.parse(readFileSync(join(FIXTURE, "config.json"), "utf8"));
const work = mkdtempSync(join(tmpdir(), "llama-config-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A copy of llama-tiny with its config.json changed; `weights` false leaves the weights out. */
function variant(name: string, change: (c: Record<string, unknown>) => void, weights = true): string {
  const dir = join(work, name);
  rmSync(dir, { recursive: true, force: true });
  require("node:fs").mkdirSync(dir);
  const c = structuredClone(config);
  change(c);
  writeFileSync(join(dir, "config.json"), JSON.stringify(c));
  if (weights) copyFileSync(join(FIXTURE, "model.safetensors"), join(dir, "model.safetensors"));
  return dir;
}

describe("config.json", () => {
  test.each([
    ["a missing key", (c: Record<string, unknown>) => delete c.num_hidden_layers, /missing num_hidden_layers/],
    [
      "heads not divisible by kv heads",
      (c: Record<string, unknown>) => (c.num_key_value_heads = 3),
      /num_attention_heads 4 is not divisible by num_key_value_heads 3/,
    ],
    [
      "an unsupported architecture",
      (c: Record<string, unknown>) => (c.architectures = ["FalconForCausalLM"]),
      /architecture "FalconForCausalLM" is not supported \(supported: GPT2LMHeadModel, LlamaForCausalLM/,
    ],
    [
      "neither architectures nor model_type, and no GPT-2 keys",
      (c: Record<string, unknown>) => {
        delete c.architectures;
        delete c.model_type;
      },
      /names no architecture \(neither architectures nor model_type\) and has no n_embd, so it is not GPT-2's \(supported: GPT2LMHeadModel, /,
    ],
    [
      "attention_bias on a Llama (o_proj's bias too, which the plans lack)",
      (c: Record<string, unknown>) => (c.attention_bias = true),
      /attention_bias true \(biases on q, k, v and o_proj\) is not supported; of the attention's biases only Qwen2's q\/k\/v ones are$/,
    ],
    [
      "mlp_bias",
      (c: Record<string, unknown>) => (c.mlp_bias = true),
      /mlp_bias true \(biases on gate, up and down\) is not supported$/,
    ],
    [
      "an architecture and a model_type that disagree",
      (c: Record<string, unknown>) => (c.model_type = "mamba"),
      /architectures names LlamaForCausalLM \(model_type "llama"\) but model_type is "mamba"/,
    ],
    [
      "an unsupported rope scaling",
      (c: Record<string, unknown>) => (c.rope_scaling = { rope_type: "yarn", factor: 4 }),
      /rope_scaling type "yarn" is not supported \(only "llama3"\)/,
    ],
    [
      "a rope scaling without its type",
      (c: Record<string, unknown>) => (c.rope_scaling = { factor: 2 }),
      /rope_scaling has no rope_type \(or type\); only "llama3" is supported/,
    ],
    [
      "a llama3 scaling without its factor",
      (c: Record<string, unknown>) => (c.rope_scaling = { rope_type: "llama3" }),
      /missing rope_scaling\.factor/,
    ],
    [
      "another activation",
      (c: Record<string, unknown>) => (c.hidden_act = "gelu"),
      /hidden_act "gelu" is not supported/,
    ],
    [
      "a head_dim the kernels do not take",
      (c: Record<string, unknown>) => (c.head_dim = 72),
      /head_dim 72 is not supported \(a multiple of 16, at most 256\)/,
    ],
  ])("%s is one line", (name, change, pattern) => {
    expectUserError(() => loadAnyModel(variant(name.replaceAll(" ", "-"), change, false)), pattern);
  });

  test("head_dim × heads inconsistent with the weights names the tensor", () => {
    const dir = variant("head-dim", (c) => (c.head_dim = 32));
    expectUserError(
      () => loadAnyModel(dir),
      /model\.layers\.0\.self_attn\.q_proj\.weight has shape \[256, 256\], expected \[128, 256\]/,
    );
  });

  test("a wrong vocabulary names the embedding's shape; an untied config without lm_head names the tensor", () => {
    expectUserError(
      () => loadAnyModel(variant("vocab", (c) => (c.vocab_size = 1000))),
      /model\.embed_tokens\.weight has shape \[1003, 256\], expected \[1000, 256\]/,
    );
    expectUserError(
      () => loadAnyModel(variant("untied", (c) => (c.tie_word_embeddings = false))),
      /tensor lm_head\.weight is missing \(expected \[1003, 256\]\)/,
    );
  });

  test('Hugging Face\'s readings: hidden_act "swish" is SiLU, num_key_value_heads null is one per query head', () => {
    const raw = JSON.parse(readFileSync(join(FIXTURE, "config.json"), "utf8"));
    const read = (change: Record<string, unknown>) =>
      llamaConfigOf({ ...raw, ...change }, "llama", "config.json", FIXTURE);
    expect(read({ hidden_act: "swish" })).toEqual(read({}));
    expect(read({ num_key_value_heads: null }).n_kv_head).toBe(raw.num_attention_heads);
  });

  test("head_dim left out: Qwen3Config's default 128 for Qwen3, hidden_size ÷ heads for the others", () => {
    const qwen3 = JSON.parse(readFileSync(join(import.meta.dir, "fixtures/qwen3-tiny/config.json"), "utf8"));
    const { head_dim: _, ...without } = qwen3;
    expect(llamaConfigOf(without, "qwen3", "config.json", FIXTURE).head_dim).toBe(128);
    // hidden_size 192 over 4 heads: 48, which Qwen3 does not default to
    expect(llamaConfigOf({ ...without, head_dim: 64 }, "qwen3", "config.json", FIXTURE).head_dim).toBe(64);
    expect(llamaConfigOf({ ...without, hidden_size: 256 }, "llama", "config.json", FIXTURE).head_dim).toBe(64);
  });

  test("Mistral's sliding window bounds the context, and a context past it names the window", () => {
    const dir = variant("mistral", (c) => {
      c.architectures = ["MistralForCausalLM"];
      c.model_type = "mistral";
      c.sliding_window = 64;
    });
    const cfg = loadAnyModel(dir).config;
    expect(cfg.n_positions).toBe(64);
    expectUserError(
      () => parseContexts("8,64", cfg),
      /^--contexts: 64 is impossible for this model: .* the model has sliding_window 64, to which runs are held, as a cache that evicts past the window is not supported: its largest context is 63$/,
    );
    expectUserError(
      () => checkPositions([[1, 2, 3]], 62, cfg),
      /^context overflow: prompt \(3 tokens\) \+ new tokens \(62\) = 65 exceeds the model's sliding_window 64, to which runs are held, /,
    );
    // a window as long as the model's positions is full attention: the limit is max_position_embeddings
    const full = loadAnyModel(
      variant("mistral-full", (c) => {
        c.architectures = ["MistralForCausalLM"];
        c.model_type = "mistral";
        c.sliding_window = c.max_position_embeddings;
      }),
    ).config;
    expect(positionsLimitOf(full)).toBe(`max_position_embeddings ${full.n_positions}`);
  });

  test("Qwen2's and Qwen3's sliding window bounds the context where some layer uses it", () => {
    const raw = JSON.parse(readFileSync(join(FIXTURE, "config.json"), "utf8"));
    const layers = raw.num_hidden_layers as number;
    for (const arch of ["qwen2", "qwen3"] as const) {
      const positions = (window: Record<string, unknown>) =>
        llamaConfigOf({ ...raw, sliding_window: 64, ...window }, arch, "config.json", FIXTURE).n_positions;
      expect(positions({ use_sliding_window: true, max_window_layers: 0 })).toBe(64);
      // no max_window_layers: Hugging Face's default, 28, holds all of this model's layers full
      expect(positions({ use_sliding_window: true })).toBe(raw.max_position_embeddings);
      expect(positions({ use_sliding_window: true, max_window_layers: layers })).toBe(raw.max_position_embeddings);
      expect(positions({ use_sliding_window: false, max_window_layers: 0 })).toBe(raw.max_position_embeddings);
      expectUserError(
        () => positions({ use_sliding_window: true, max_window_layers: "abc" }),
        /^config\.json: max_window_layers must be a non-negative integer, got "abc"$/,
      );
    }
    // Llama has no window of its own
    const llama = llamaConfigOf({ ...raw, sliding_window: 64, use_sliding_window: true }, "llama", "c", FIXTURE);
    expect(llama.n_positions).toBe(raw.max_position_embeddings);
  });
});

describe("sharded checkpoints", () => {
  const index = (dir: string, map: Record<string, string>) =>
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: map }));

  test("a shard outside the folder, a missing shard, a tensor in two shards: one line each", () => {
    const dir = variant("sharded", () => {}, false);
    index(dir, { "model.embed_tokens.weight": "../elsewhere.safetensors" });
    expectUserError(() => loadAnyModel(dir), /names shard "\.\.\/elsewhere\.safetensors", not a file in/);
    index(dir, { "model.embed_tokens.weight": "model-00001-of-00002.safetensors" });
    expectUserError(
      () => loadAnyModel(dir),
      /shard model-00001-of-00002\.safetensors \(of model\.embed_tokens\.weight\) is missing/,
    );
    copyFileSync(join(FIXTURE, "model.safetensors"), join(dir, "a.safetensors"));
    copyFileSync(join(FIXTURE, "model.safetensors"), join(dir, "b.safetensors"));
    index(dir, { "model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors" });
    expectUserError(
      () => loadAnyModel(dir),
      /tensor model\.\S+ is in two shards \(a\.safetensors and b\.safetensors\)/,
    );
    writeFileSync(join(dir, "model.safetensors.index.json"), "{ nope");
    expectUserError(() => loadAnyModel(dir), /model\.safetensors\.index\.json: not valid JSON/);
  });
});

describe("presets and rotary frequencies", () => {
  test("weights that do not fit the host's free memory are refused, naming a storage type that fits", () => {
    const cfg = LLAMA_PRESETS["llama-3.1-8b"]!;
    expectUserError(
      () => checkHostMemory(cfg, "f32", 24e9),
      /llama-3\.1-8b in f32 is 32\.1 GB .* 24\.0 GB .*: use --dtype bf16/,
    );
    expectUserError(() => checkHostMemory(cfg, "bf16", 8e9), /in bf16 is 16\.1 GB .* 8\.0 GB of free memory$/);
    expect(() => checkHostMemory(cfg, "bf16", 24e9)).not.toThrow();
  });

  test("the presets have their released models' exact parameter counts", () => {
    const counts = Object.fromEntries(Object.entries(LLAMA_PRESETS).map(([n, c]) => [n, llamaParameterCount(c)]));
    expect(counts).toEqual({
      "smollm2-135m": 134_515_008,
      "smollm2-360m": 361_821_120,
      "qwen2.5-0.5b": 494_032_768,
      "qwen3-0.6b": 596_049_920,
      "llama-3.2-1b": 1_235_814_400,
      "tinyllama-1.1b": 1_100_048_384,
      "llama-3.2-3b": 3_212_749_824,
      "llama-3.1-8b": 8_030_261_248,
    });
  });

  test("llama3 scaling keeps high frequencies, divides low ones by the factor, blends between", () => {
    const cfg = LLAMA_PRESETS["llama-3.2-1b"]!;
    const plain = inverseFrequencies({ ...cfg, rope_scaling: null });
    const scaled = inverseFrequencies(cfg);
    expect(scaled[0]).toBe(plain[0]!); // wavelength 2π: far below 8192 / 4
    expect(scaled[31]).toBeCloseTo(plain[31]! / 32, 15); // the longest wavelength: beyond 8192
    const blended = Array.from(scaled).filter((f, i) => f !== plain[i] && Math.abs(f - plain[i]! / 32) > 1e-18);
    expect(blended.length).toBeGreaterThan(0);
  });
});

describe("writing a checkpoint back", () => {
  test("saveLlamaModel writes what loadLlama reads back: every parameter of the project's layout, bit for bit", () => {
    for (const fixture of ["llama-tiny", "qwen3-tiny"]) {
      const original = loadAnyModel(join(import.meta.dir, "fixtures", fixture)) as LlamaWeights;
      const dir = join(work, `saved-${fixture}`);
      saveLlamaModel(original, dir);
      const back = loadAnyModel(dir) as LlamaWeights;
      const collect = (w: LlamaWeights) => {
        const parts: number[] = [];
        w.stream((_spec, chunk) => parts.push(...chunk));
        return Float32Array.from(parts);
      };
      expect(back.config).toEqual({ ...original.config, name: `saved-${fixture}` });
      expect(collect(back)).toEqual(collect(original));
    }
  });
});
