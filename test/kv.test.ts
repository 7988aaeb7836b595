// `bun run kv` against figures computed by hand: GPT-2 small (73,728 B per token in fp32), a Llama-3-8B-shaped
// GQA config and an MQA config written here; and one clear line for every bad config.
import { afterAll, describe, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { kvCacheBytesPerToken, PRESETS } from "../src/model/gpt2.ts";
import { shapeOf, kvReport, readDecoderConfig, type KvReport } from "../src/model/kv.ts";
import { runCli } from "./helpers/cli.ts";

const dir = mkdtempSync(join(tmpdir(), "kv-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A named pipe: reading it would wait for a writer. */
function fifo(): string {
  const path = join(dir, "config.fifo");
  if (!existsSync(path)) execFileSync("mkfifo", [path]);
  return path;
}

function configFile(name: string, body: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof body === "string" ? body : JSON.stringify(body));
  return path;
}

/** Llama 3 8B's shapes: 32 layers, 32 query heads sharing 8 K/V heads of 128, hidden 4096, untied head */
const llama3 = configFile("llama3.json", {
  model_type: "llama",
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  hidden_size: 4096,
  intermediate_size: 14336,
  vocab_size: 128256,
  max_position_embeddings: 8192,
  tie_word_embeddings: false,
});

const kv = (...args: string[]) => runCli("kv", args);

describe("GPT-2 small", () => {
  const r = kvReport(shapeOf(PRESETS.gpt2!), 1024, 1, "f32");

  test("73,728 B per token in fp32: 2 × 12 layers × 768 × 4 B; 72 MiB for 1,024 tokens", () => {
    expect(r.kv_bytes_per_token).toBe(73_728);
    expect(r.kv_bytes_per_token).toBe(kvCacheBytesPerToken(PRESETS.gpt2!));
    expect(r.kv_bytes).toBe(75_497_472);
    expect(r.gqa_saving).toBe(1);
    expect(r.mha_kv_bytes_per_token).toBe(73_728);
  });

  test("against 124,439,808 parameters (497,759,232 B): the cache outgrows them past 6,752 tokens of context × batch", () => {
    expect(r.parameters).toBe(124_439_808);
    expect(r.weight_bytes).toBe(497_759_232);
    expect(r.crossover_tokens).toBe(6752); // 497,759,232 / 73,728 = 6,751.3
    expect(r.crossover.find((c) => c.batch === 8)!.context).toBe(844);
  });

  test("bf16 halves both the cache and the weights; the crossover stays", () => {
    const half = kvReport(shapeOf(PRESETS.gpt2!), 1024, 4, "bf16");
    expect(half.kv_bytes_per_token).toBe(36_864);
    expect(half.kv_bytes).toBe(36_864 * 1024 * 4);
    expect(half.crossover_tokens).toBe(6752);
  });
});

describe("GQA and MQA configs", () => {
  test("Llama 3 8B's shapes: 131,072 B per token in bf16, 4× less than MHA; 8,030,261,248 parameters", () => {
    const r = kvReport(readDecoderConfig(llama3), 8192, 2, "bf16");
    expect(r.family).toBe("llama-style");
    expect(r.kv_bytes_per_token).toBe(2 * 32 * 8 * 128 * 2);
    expect(r.mha_kv_bytes_per_token).toBe(2 * 32 * 32 * 128 * 2);
    expect(r.gqa_saving).toBe(4);
    expect(r.kv_bytes).toBe(131_072 * 8192 * 2);
    // embeddings + head 2 × 128256 × 4096; per layer 4096 × 128 × (2·32 + 2·8) + 3 × 4096 × 14336 + 2 × 4096; final norm
    expect(r.parameters).toBe(8_030_261_248);
    expect(r.crossover_tokens).toBe(Math.ceil((8_030_261_248 * 2) / 131_072));
  });

  test("a config naming its architecture by model_type alone is counted as the project runs it, exactly", () => {
    expect(readDecoderConfig(llama3).parameters_how).toMatch(/^exact for llama: /);
    const bert = configFile("bert-shaped.json", {
      model_type: "bert",
      num_hidden_layers: 2,
      num_attention_heads: 4,
      hidden_size: 64,
      intermediate_size: 128,
      vocab_size: 100,
    });
    expect(readDecoderConfig(bert).parameters_how).toMatch(/^estimated from the shapes/);
  });

  test("a sliding window is noted where the loader holds runs to it, and only there", () => {
    const qwen2 = {
      model_type: "qwen2",
      num_hidden_layers: 4,
      num_attention_heads: 8,
      num_key_value_heads: 2,
      hidden_size: 512,
      intermediate_size: 1024,
      vocab_size: 1000,
      max_position_embeddings: 32768,
      sliding_window: 4096,
    };
    const notes = (name: string, body: object) => readDecoderConfig(configFile(name, body)).notes;
    const held = [
      "sliding_window 4096 is shorter than max_position_embeddings 32768: generate and profile are held to the window (a cache that evicts past it is not supported); the figures here are for a full cache of the context asked",
    ];
    // Qwen2 uses its window only with use_sliding_window, from max_window_layers on (default 28)
    expect(notes("qwen2-full.json", qwen2)).toEqual([]);
    expect(notes("qwen2-layers-full.json", { ...qwen2, use_sliding_window: true })).toEqual([]);
    expect(notes("qwen2-window.json", { ...qwen2, use_sliding_window: true, max_window_layers: 2 })).toEqual(held);
    expect(notes("mistral.json", { ...qwen2, model_type: "mistral" })).toEqual(held);
    expect(readDecoderConfig(configFile("mistral-max.json", { ...qwen2, model_type: "mistral" })).max_context).toBe(
      4096,
    );
  });

  test("MQA with an explicit head_dim, tied embeddings and QKV biases", () => {
    const mqa = configFile("mqa.json", {
      model_type: "qwen2",
      num_hidden_layers: 18,
      num_attention_heads: 8,
      num_key_value_heads: 1,
      head_dim: 256,
      hidden_size: 2048,
      intermediate_size: 16384,
      vocab_size: 256000,
      max_position_embeddings: 8192,
      tie_word_embeddings: true,
    });
    const r = kvReport(readDecoderConfig(mqa), 100, 1, "f16");
    expect(r.kv_bytes_per_token).toBe(2 * 18 * 1 * 256 * 2);
    expect(r.gqa_saving).toBe(8);
    const perLayer = 2048 * 256 * (2 * 8 + 2 * 1) + 256 * (8 + 2 * 1) + 3 * 2048 * 16384 + 2 * 2048;
    expect(r.parameters).toBe(256000 * 2048 + 18 * perLayer + 2048);
  });

  test("the command prints the GQA saving and, with --json, the same figures", () => {
    const text = kv("--config", llama3, "--context", "8192", "--dtype", "bf16");
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("per token:  131,072 B");
    expect(text.stdout).toMatch(/GQA: 8 K\/V heads shared by 32 query heads, 4× smaller/);
    const json = JSON.parse(
      kv("--config", llama3, "--context", "8192", "--batch", "2", "--dtype", "bf16", "--json").stdout,
    ) as KvReport;
    expect(json.kv_bytes).toBe(131_072 * 8192 * 2);
    const gpt2 = kv("--preset", "gpt2", "--json");
    expect((JSON.parse(gpt2.stdout) as KvReport).kv_bytes_per_token).toBe(73_728);
  });

  test("a context past the model's own is figured, and said to be past it", () => {
    const past = kv("--preset", "gpt2", "--context", "5000", "--batch", "3");
    expect(past.stdout).toMatch(/context 5,000 × batch 3: .* the weights \(beyond its 1,024-token context\)$/m);
    expect(kv("--preset", "gpt2", "--context", "1024").stdout).toMatch(/context 1,024 × batch 1: .* the weights$/m);
  });
});

describe("bad configs and flags: one line, exit ≠ 0", () => {
  test.each([
    ["a missing file", ["--config", join(dir, "none.json")], /file not found/],
    ["a directory", ["--config", dir], /is a directory/],
    ["a FIFO", ["--config", fifo()], /is a FIFO \(named pipe\), not a regular file/],
    ["a device", ["--config", "/dev/zero"], /is a character device, not a regular file/],
    ["invalid JSON", ["--config", configFile("broken.json", "{ not json")], /not valid JSON/],
    ["an array", ["--config", configFile("array.json", [1, 2])], /expected a JSON object/],
    [
      "no known shape",
      ["--config", configFile("bert.json", { model_type: "bert", hidden_size: 768 })],
      /neither GPT-2's n_layer/,
    ],
    [
      "a missing field",
      ["--config", configFile("partial.json", { num_hidden_layers: 2 })],
      /missing num_attention_heads/,
    ],
    [
      "heads not a multiple of K/V heads",
      [
        "--config",
        configFile("odd.json", {
          num_hidden_layers: 2,
          num_attention_heads: 12,
          num_key_value_heads: 5,
          hidden_size: 768,
          intermediate_size: 3072,
          vocab_size: 100,
        }),
      ],
      /not a multiple/,
    ],
    [
      "a non-integer size",
      ["--config", configFile("float.json", { n_layer: 1.5, n_head: 2, n_embd: 8, n_positions: 8, vocab_size: 10 })],
      /n_layer must be a positive integer/,
    ],
    [
      "an architecture the project runs under another model_type",
      [
        "--config",
        configFile("mamba.json", { architectures: ["LlamaForCausalLM"], model_type: "mamba", num_hidden_layers: 2 }),
      ],
      /architectures names LlamaForCausalLM \(model_type "llama"\) but model_type is "mamba"/,
    ],
    ["both --preset and --config", ["--preset", "gpt2", "--config", llama3], /mutually exclusive/],
    ["a zero batch", ["--batch", "0"], /--batch/],
    ["an unknown dtype", ["--dtype", "f8"], /f8/],
  ])("%s", (_, args, message) => {
    const r = kv(...args);
    expect(r.code).not.toBe(0);
    const lines = r.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^error: /);
    expect(lines[0]).toMatch(message);
  });
});
