// The GGUF writer against its format (read back by a small reader written here from the spec), GPT-2's
// tensors and vocabulary as llama.cpp's converter writes them, and the file read back by llama.cpp itself.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { encode } from "gpt-tokenizer/encoding/r50k_base";

import { GPT2_FAMILY, PRESETS, loadModel, materializeWeights, randomWeights } from "../src/model/gpt2.ts";
import { GGUF_MAGIC, GGUFValueType, writeGGUF, type GGUFValue } from "../src/peers/gguf.ts";
import { loadAnyModel } from "../src/model/architectures.ts";
import { gpt2Tensors, TokenType, writeGPT2GGUF } from "../src/peers/gguf-gpt2.ts";
import { llamaCppRefuses, ropeFactors, writeLlamaGGUF } from "../src/peers/gguf-llama.ts";
import { LLAMA_PRESETS, type LlamaWeights } from "../src/model/llama.ts";
import { readSafetensors, tensorFloat32 } from "../src/model/safetensors.ts";
import { BYTE_TO_CHAR, gpt2Vocab } from "../src/model/gpt2-vocab.ts";
import { llamaPeerUnavailable, runNodeModule } from "../src/peers/llama.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import { generate } from "../src/run/generate.ts";
import { launchMode } from "../src/run/launch-modes.ts";
import { Session } from "../src/run/session.ts";
import { expectUserError } from "./helpers/expect.ts";

const ROOT = join(import.meta.dir, "..");
const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const dir = mkdtempSync(join(tmpdir(), "gguf-"));
const cpu = CpuBackend.open();
afterAll(() => {
  cpu.close();
  rmSync(dir, { recursive: true, force: true });
});

// ---- a GGUF reader, from the spec ----------------------------------------------------------------

interface ReadTensor {
  name: string;
  dims: number[];
  type: number;
  offset: number;
}
interface ReadFile {
  version: number;
  metadata: Map<string, unknown>;
  tensors: ReadTensor[];
  headerBytes: number;
  dataStart: number;
  bytes: Uint8Array;
}

function readGGUF(path: string): ReadFile {
  const bytes = new Uint8Array(readFileSync(path));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const u32 = () => {
    const v = view.getUint32(at, true);
    at += 4;
    return v;
  };
  const u64 = () => {
    const v = Number(view.getBigUint64(at, true));
    at += 8;
    return v;
  };
  const str = () => {
    const n = u64();
    const s = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(at, at + n));
    at += n;
    return s;
  };
  const value = (type: number): unknown => {
    switch (type) {
      case GGUFValueType.UINT32:
        return u32();
      case GGUFValueType.INT32: {
        const v = view.getInt32(at, true);
        at += 4;
        return v;
      }
      case GGUFValueType.FLOAT32: {
        const v = view.getFloat32(at, true);
        at += 4;
        return v;
      }
      case GGUFValueType.UINT64:
        return u64();
      case GGUFValueType.BOOL:
        return view.getUint8(at++) !== 0;
      case GGUFValueType.STRING:
        return str();
      case GGUFValueType.ARRAY: {
        const of = u32();
        const n = u64();
        return Array.from({ length: n }, () => value(of));
      }
      default:
        throw new Error(`value type ${type} not expected from this writer`);
    }
  };
  expect(u32()).toBe(GGUF_MAGIC);
  expect(new TextDecoder().decode(bytes.subarray(0, 4))).toBe("GGUF");
  const version = u32();
  const nTensors = u64();
  const nKV = u64();
  const metadata = new Map<string, unknown>();
  for (let i = 0; i < nKV; i++) {
    const key = str();
    metadata.set(key, value(u32()));
  }
  const tensors = Array.from({ length: nTensors }, () => {
    const name = str();
    const dims = Array.from({ length: u32() }, u64);
    return { name, dims, type: u32(), offset: u64() };
  });
  const alignment = (metadata.get("general.alignment") as number | undefined) ?? 32;
  return { version, metadata, tensors, headerBytes: at, dataStart: Math.ceil(at / alignment) * alignment, bytes };
}

function tensorData(f: ReadFile, t: ReadTensor): Float32Array {
  const n = t.dims.reduce((a, b) => a * b, 1);
  return new Float32Array(f.bytes.slice(f.dataStart + t.offset, f.dataStart + t.offset + 4 * n).buffer);
}

// ---- the format ------------------------------------------------------------------------------------

describe("writeGGUF", () => {
  const meta: [string, GGUFValue][] = [
    ["general.architecture", { kind: "string", value: "tëst" }],
    ["a.u32", { kind: "u32", value: 4_000_000_000 }],
    ["a.i32", { kind: "i32", value: -7 }],
    ["a.f32", { kind: "f32", value: 0.5 }],
    ["a.u64", { kind: "u64", value: 2 ** 40 }],
    ["a.bool", { kind: "bool", value: true }],
    ["a.strings", { kind: "array", of: "string", values: ["Ġthe", "", "<|endoftext|>"] }],
    ["a.ints", { kind: "array", of: "i32", values: [1, -2, 3] }],
  ];
  const shapes = [[3], [7, 5], [1, 1, 2]];
  const tensors = shapes.map((dims, i) => ({ name: `t${i}`, dims }));
  const data = shapes.map((dims, i) =>
    Float32Array.from({ length: dims.reduce((a, b) => a * b, 1) }, (_, k) => i * 100 + k + 0.25),
  );
  /** every tensor's elements back to back, in chunks of 4 that cross the tensors' boundaries */
  const all = Float32Array.from(data.flatMap((d) => [...d]));
  const produce = (emit: (chunk: Float32Array) => void) => {
    for (let i = 0; i < all.length; i += 4) emit(all.subarray(i, i + 4));
  };

  test.each([32, 64])("alignment %i: header, metadata, tensor infos, aligned offsets, data", (alignment) => {
    const path = join(dir, `synthetic-${alignment}.gguf`);
    const size = writeGGUF(path, meta, tensors, produce, alignment);
    const f = readGGUF(path);
    expect(f.version).toBe(3);
    expect(f.bytes.length).toBe(size);
    const expected = new Map<string, unknown>(meta.map(([k, v]) => [k, v.kind === "array" ? v.values : v.value]));
    if (alignment !== 32) expected.set("general.alignment", alignment); // written only when not the default
    expect(f.metadata).toEqual(expected);
    expect(f.tensors.map((t) => [t.name, t.dims, t.type])).toEqual(shapes.map((d, i) => [`t${i}`, d, 0]));
    // padding after the infos only (zeros), each tensor at an aligned offset right after the previous one
    expect(f.dataStart % alignment).toBe(0);
    expect([...f.bytes.subarray(f.headerBytes, f.dataStart)].every((b) => b === 0)).toBe(true);
    let next = 0;
    for (const [i, t] of f.tensors.entries()) {
      expect(t.offset % alignment).toBe(0);
      expect(t.offset).toBe(next);
      next = Math.ceil((t.offset + 4 * t.dims.reduce((a, b) => a * b, 1)) / alignment) * alignment;
      expect([...tensorData(f, t)]).toEqual([...data[i]!]);
    }
    expect(size).toBe(f.dataStart + next);
  });

  test("refuses a bad alignment, a repeated key, and data that does not fill its tensors or overflows them", () => {
    expect(() => writeGGUF(join(dir, "bad.gguf"), meta, tensors, produce, 12)).toThrow(/alignment/);
    expect(() => writeGGUF(join(dir, "bad.gguf"), [...meta, meta[0]!], tensors, produce)).toThrow(/twice/);
    expect(() =>
      writeGGUF(join(dir, "bad.gguf"), [], [{ name: "x", dims: [4] }], (emit) => emit(new Float32Array(3))),
    ).toThrow("gguf: tensor x got 3 elements, its dims need 4");
    expect(() =>
      writeGGUF(join(dir, "bad.gguf"), [], [{ name: "x", dims: [4] }], (emit) => emit(new Float32Array(5))),
    ).toThrow(/more data/);
  });
});

// ---- GPT-2 -------------------------------------------------------------------------------------------

describe("GPT-2's vocabulary rebuilt from the r50k ranks", () => {
  const v = gpt2Vocab();

  test("50,257 tokens and 50,000 merges, spelt as Hugging Face's vocab.json and merges.txt", () => {
    expect(v.tokens).toHaveLength(50257);
    expect(v.merges).toHaveLength(50000);
    expect(v.tokens.slice(0, 3)).toEqual(["!", '"', "#"]);
    expect(v.tokens[198]).toBe("Ċ"); // "\n"
    expect(v.tokens[220]).toBe("Ġ"); // " "
    expect(v.tokens[262]).toBe("Ġthe");
    expect(v.tokens[50256]).toBe("<|endoftext|>");
    expect(v.merges.slice(0, 10)).toEqual(["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t"]);
    expect(new Set(BYTE_TO_CHAR).size).toBe(256);
  });

  test("every merge joins two tokens of lower rank into the token of its rank", () => {
    const id = new Map(v.tokens.map((t, i) => [t, i]));
    v.merges.forEach((m, i) => {
      const [left, right] = m.split(" ");
      const made = 256 + i;
      expect(id.get(left!)! < made && id.get(right!)! < made).toBe(true);
      expect(left! + right!).toBe(v.tokens[made]!);
    });
  });
});

describe("GPT-2 as llama.cpp's converter writes it", () => {
  const w = loadModel(FIXTURE);
  const arrays = materializeWeights(w);
  const path = join(dir, "tiny.gguf");
  writeGPT2GGUF(w, path);
  const f = readGGUF(path);

  test("metadata: gpt2 architecture and hyperparameters, F32 file, byte-level BPE tokenizer", () => {
    const m = f.metadata;
    expect(m.get("general.architecture")).toBe("gpt2");
    expect(m.get("general.file_type")).toBe(0);
    expect([
      m.get("gpt2.block_count"),
      m.get("gpt2.context_length"),
      m.get("gpt2.embedding_length"),
      m.get("gpt2.feed_forward_length"),
      m.get("gpt2.attention.head_count"),
    ]).toEqual([2, 64, 128, 512, 2]);
    expect(m.get("gpt2.attention.layer_norm_epsilon")).toBeCloseTo(1e-5, 10);
    expect(m.get("tokenizer.ggml.model")).toBe("gpt2");
    expect(m.get("tokenizer.ggml.pre")).toBe("gpt-2");
    // a 1,001-token vocabulary: r50k's first ids, and the 745 merges that make ids 256..1000
    expect(m.get("tokenizer.ggml.tokens")).toEqual(gpt2Vocab().tokens.slice(0, 1001));
    expect(m.get("tokenizer.ggml.merges")).toEqual(gpt2Vocab().merges.slice(0, 745));
    expect(new Set(m.get("tokenizer.ggml.token_type") as number[])).toEqual(new Set([TokenType.NORMAL]));
    expect(m.has("tokenizer.ggml.eos_token_id")).toBe(false); // <|endoftext|> is not in this vocabulary
  });

  test("a GPT-2 reshaped to fewer K/V heads (profile --kv-heads) is refused with one line, no file written", () => {
    const mqa = join(dir, "mqa.gguf");
    expectUserError(
      () => writeGPT2GGUF(randomWeights(GPT2_FAMILY.withKvHeads(w.config, 1), 0), mqa),
      /^gpt2-tiny reshaped to 1 K\/V heads of 2 has no form as a GGUF file: /,
    );
    expect(existsSync(mqa)).toBe(false);
  });

  test("tensors: llama.cpp's GPT-2 names and shapes, no separate output head (tied), Conv1D weights transposed", () => {
    const dims = new Map(f.tensors.map((t) => [t.name, t.dims]));
    expect(f.tensors).toHaveLength(2 + 2 * 12 + 2);
    expect(dims.get("token_embd.weight")).toEqual([128, 1001]);
    expect(dims.get("position_embd.weight")).toEqual([128, 64]);
    expect(dims.get("blk.1.attn_qkv.weight")).toEqual([128, 384]);
    expect(dims.get("blk.1.ffn_up.weight")).toEqual([128, 512]);
    expect(dims.get("blk.1.ffn_down.weight")).toEqual([512, 128]);
    expect(dims.get("output_norm.bias")).toEqual([128]);
    expect(dims.has("output.weight")).toBe(false);
    expect(new Set(f.tensors.map((t) => t.type))).toEqual(new Set([0]));
    // blk.0.attn_qkv row o (output feature o) = c_attn's column o
    const qkv = tensorData(f, f.tensors.find((t) => t.name === "blk.0.attn_qkv.weight")!);
    const cAttn = arrays.get("h.0.attn.c_attn.weight")!; // (128, 384), input-first
    for (const [o, c] of [
      [0, 0],
      [5, 17],
      [383, 127],
    ] as const)
      expect(qkv[o * 128 + c]).toBe(cAttn[c * 384 + o]!);
    expect([...tensorData(f, f.tensors.find((t) => t.name === "token_embd.weight")!)]).toEqual([
      ...arrays.get("wte.weight")!,
    ]);
    // every tensor, transposed or not, holds its parameter's values
    const ffnDown = tensorData(f, f.tensors.find((t) => t.name === "blk.1.ffn_down.weight")!); // c_proj (512, 128) → (128, 512)
    const cProj = arrays.get("h.1.mlp.c_proj.weight")!;
    for (const [o, c] of [
      [0, 0],
      [127, 511],
      [64, 3],
    ] as const)
      expect(ffnDown[o * 512 + c]).toBe(cProj[c * 128 + o]!);
    expect([...tensorData(f, f.tensors.find((t) => t.name === "output_norm.bias")!)]).toEqual([
      ...arrays.get("ln_f.bias")!,
    ]);
  });

  test("a full GPT-2 vocabulary: <|endoftext|> is the control token and bos / eos / unk", () => {
    const cfg = { ...PRESETS.gpt2!, name: "vocab-check", n_layer: 1, n_head: 1, n_embd: 8, n_positions: 32 };
    const full = join(dir, "full-vocab.gguf");
    writeGPT2GGUF(randomWeights(cfg, 1), full);
    const m = readGGUF(full).metadata;
    const types = m.get("tokenizer.ggml.token_type") as number[];
    expect(types[50256]).toBe(TokenType.CONTROL);
    expect(types.filter((t) => t === TokenType.NORMAL)).toHaveLength(50256);
    for (const k of ["bos", "eos", "unknown"]) expect(m.get(`tokenizer.ggml.${k}_token_id`)).toBe(50256);
    expect(gpt2Tensors(cfg).length).toBe(2 + 12 + 2);
  });
});

// ---- read back by llama.cpp ----------------------------------------------------------------------------

const unavailable = llamaPeerUnavailable();
if (unavailable) console.warn(`skipping llama.cpp read-back: ${unavailable}`);

describe.skipIf(unavailable !== null)("read back by llama.cpp (node-llama-cpp)", () => {
  test("gpt2-tiny's greedy tokens from llama.cpp equal the fixture's, flash attention off and on", () => {
    const expected = JSON.parse(readFileSync(join(FIXTURE, "expected.json"), "utf8")) as {
      prompt: number[];
      generated: number[];
    };
    const r = runNodeModule([
      join(ROOT, "src/peers/llama_peer.mjs"),
      "--model",
      join(dir, "tiny.gguf"),
      "--threads",
      "1",
      "--contexts",
      "8",
      "--repeats",
      "1",
      "--warmup",
      "0",
      "--prompt-ids",
      expected.prompt.join(","),
      "--new-tokens",
      "20",
    ]);
    expect(r.stderr).toBe("");
    const out = JSON.parse(r.stdout) as { generated: Record<string, number[]> };
    expect(Object.keys(out.generated).sort()).toEqual(["fa-off", "fa-on"]);
    for (const tokens of Object.values(out.generated)) expect(tokens).toEqual(expected.generated.slice(0, 20));
  }, 60_000);

  test("llama.cpp tokenizes text with the rebuilt vocabulary and merges exactly as gpt-tokenizer does", () => {
    const text = "Hello, I'm a language model; naïve café — 12345 tokens\n\n  indented\tand ünïcödé 🤖!";
    const r = runNodeModule([join(import.meta.dir, "helpers/llama-tokenize.mjs"), join(dir, "full-vocab.gguf"), text]);
    expect(JSON.parse(r.stdout)).toEqual(encode(text));
  }, 60_000);
});

// ---- the Llama family ------------------------------------------------------------------------------------

describe("the Llama family as llama.cpp's converter writes it", () => {
  const LLAMA = join(import.meta.dir, "fixtures/llama-tiny");
  const w = loadAnyModel(LLAMA) as LlamaWeights;
  const path = join(dir, "llama-tiny.gguf");
  writeLlamaGGUF(w, path);
  const f = readGGUF(path);
  const checkpoint = readSafetensors(join(LLAMA, "model.safetensors"));
  const hf = (name: string) => tensorFloat32(checkpoint, checkpoint.tensors.get(name)!);

  test("metadata: llama architecture, GQA heads, head size, RMSNorm epsilon, rope base", () => {
    const m = f.metadata;
    expect(m.get("general.architecture")).toBe("llama");
    expect([
      m.get("llama.block_count"),
      m.get("llama.embedding_length"),
      m.get("llama.feed_forward_length"),
      m.get("llama.attention.head_count"),
      m.get("llama.attention.head_count_kv"),
      m.get("llama.rope.dimension_count"),
    ]).toEqual([2, 256, 128, 4, 2, 64]);
    expect(m.get("llama.rope.freq_base")).toBe(10000);
    expect((m.get("tokenizer.ggml.tokens") as string[]).length).toBe(1003);
  });

  test("tensors: q and k split from the project's qkv, (out, in) again, their rows permuted to interleaved pairs", () => {
    const dims = new Map(f.tensors.map((t) => [t.name, t.dims]));
    expect(dims.get("blk.0.attn_q.weight")).toEqual([256, 256]);
    expect(dims.get("blk.0.attn_k.weight")).toEqual([256, 128]);
    expect(dims.get("blk.1.ffn_gate.weight")).toEqual([256, 128]);
    expect(dims.get("blk.1.ffn_down.weight")).toEqual([128, 256]);
    expect(dims.has("output.weight")).toBe(false); // tied
    const q = tensorData(f, f.tensors.find((t) => t.name === "blk.0.attn_q.weight")!);
    const hfQ = hf("model.layers.0.self_attn.q_proj.weight"); // (256 out, 256 in)
    // head 1, pair j = 3: GGUF rows 2j, 2j + 1 of the head are HF rows j and j + 32 of the head
    for (const s of [0, 1])
      for (const c of [0, 7, 255]) expect(q[(64 + 6 + s) * 256 + c]).toBe(hfQ[(64 + 3 + 32 * s) * 256 + c]!);
    const v = tensorData(f, f.tensors.find((t) => t.name === "blk.1.attn_v.weight")!);
    expect([...v]).toEqual([...hf("model.layers.1.self_attn.v_proj.weight")]); // v is not permuted
    const up = tensorData(f, f.tensors.find((t) => t.name === "blk.0.ffn_up.weight")!);
    expect([...up]).toEqual([...hf("model.layers.0.mlp.up_proj.weight")]);
  });

  test("llama3 rope scaling becomes rope_freqs: the divisor of each frequency", () => {
    const cfg = LLAMA_PRESETS["llama-3.2-1b"]!;
    const factors = ropeFactors(cfg)!;
    expect(factors).toHaveLength(32);
    expect(factors[0]).toBe(1);
    expect(factors[31]).toBeCloseTo(32, 4);
    expect(ropeFactors({ ...cfg, rope_scaling: null })).toBeNull();
  });

  test("llama.cpp's qwen2 loader is not given heads × head_dim other than the hidden size; llama and qwen3 are", () => {
    const qwen2 = LLAMA_PRESETS["qwen2.5-0.5b"]!;
    expect(llamaCppRefuses(qwen2)).toBeNull();
    expect(llamaCppRefuses({ ...qwen2, name: "wide", head_dim: 128 })).toBe(
      "llama.cpp's qwen2 loader takes heads × head_dim = hidden_size, and wide's is 14 × 128 = 1792 against 896",
    );
    expect(llamaCppRefuses({ ...LLAMA_PRESETS["llama-3.2-1b"]!, head_dim: 128 })).toBeNull();
    expect(llamaCppRefuses(LLAMA_PRESETS["qwen3-0.6b"]!)).toBeNull(); // 16 × 128 = 2048 against 1024
  });

  const present = [
    join(import.meta.dir, "fixtures/llama-tiny"),
    join(import.meta.dir, "fixtures/qwen3-tiny"),
    join(import.meta.dir, "../../shared/fixtures/llama-mini"),
  ].filter((d) => existsSync(d));
  test.skipIf(unavailable !== null)(
    "llama.cpp reads llama (GQA, tied), qwen3 (q/k norms) and llama3-scaled llama (untied) back: the references' greedy tokens",
    () => {
      for (const fixture of present) {
        const expected = JSON.parse(readFileSync(join(fixture, "expected.json"), "utf8"));
        const gguf = join(dir, `${fixture.split("/").pop()}.gguf`);
        writeLlamaGGUF(loadAnyModel(fixture) as LlamaWeights, gguf);
        const r = runNodeModule([
          join(ROOT, "src/peers/llama_peer.mjs"),
          ...["--model", gguf, "--threads", "1", "--contexts", "8", "--repeats", "1", "--warmup", "0"],
          ...["--prompt-ids", expected.prompt.join(","), "--new-tokens", "20"],
        ]);
        expect(r.stderr).toBe("");
        const out = JSON.parse(r.stdout) as { generated: Record<string, number[]> };
        for (const tokens of Object.values(out.generated)) expect(tokens).toEqual(expected.generated.slice(0, 20));
      }
    },
    120_000,
  );
  test.skipIf(unavailable !== null)(
    "llama.cpp reads qwen2 (q/k/v biases, rows not permuted) back: the project's greedy tokens, each clear of the runner-up",
    () => {
      // llama-tiny's weights as a qwen2 model, its q/k/v biases drawn so that they move the logits
      const qwen2 = { ...w.config, name: "qwen2-of-llama-tiny", arch: "qwen2" as const, qkv_bias: true };
      const weights: LlamaWeights = {
        ...w,
        config: qwen2,
        stream: (visit) =>
          w.stream((spec, chunk, offset) =>
            visit(
              spec,
              spec.name.endsWith(".qkv.bias") ? chunk.map((_, i) => Math.sin(offset + i + 1)) : chunk,
              offset,
            ),
          ),
      };
      const prompt = [5, 17, 300, 42, 911, 64, 3, 250];
      const s = new Session(cpu, weights);
      let ours: number[];
      try {
        ours = generate(s, { prompt, maxNewTokens: 20, cache: true, mode: launchMode("eager") }).generatedIds;
        // each token's logit clears the runner-up's, so that llama.cpp's own summation order cannot flip it
        const V = qwen2.vocab_size;
        const logits = s.logitsAtEveryPosition([...prompt, ...ours.slice(0, -1)]);
        for (const [t, id] of ours.entries()) {
          const row = Array.from(logits.subarray((prompt.length - 1 + t) * V, (prompt.length + t) * V));
          const top = Math.max(...row);
          expect(row.indexOf(top)).toBe(id);
          expect(top - Math.max(...row.filter((_, i) => i !== id))).toBeGreaterThan(1e-3);
        }
      } finally {
        s.close();
      }
      const gguf = join(dir, "qwen2-of-llama-tiny.gguf");
      writeLlamaGGUF(weights, gguf);
      expect(readGGUF(gguf).metadata.get("general.architecture")).toBe("qwen2");
      const r = runNodeModule([
        join(ROOT, "src/peers/llama_peer.mjs"),
        ...["--model", gguf, "--threads", "1", "--contexts", "8", "--repeats", "1", "--warmup", "0"],
        ...["--prompt-ids", prompt.join(","), "--new-tokens", "20"],
      ]);
      expect(r.stderr).toBe("");
      const out = JSON.parse(r.stdout) as { generated: Record<string, number[]> };
      for (const tokens of Object.values(out.generated)) expect(tokens).toEqual(ours);
    },
    120_000,
  );
});
