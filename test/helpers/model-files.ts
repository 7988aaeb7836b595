// Model files made at test time (nothing binary is committed): seeded GPT-2 checkpoints of any shape written
// as safetensors — the micro one (1 layer, 8 wide, a few KiB) that test/hostile-inputs.test.ts breaks in
// byte-level ways, and small ones with a real model's layer count — and checkpoints rewritten from a fixture's
// tensors (any storage type, poisoned, or cut into shards with their index).
import { chmodSync, copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { materializeWeights, parameterSpecs, randomWeights, type GPT2Config } from "../../src/model/gpt2.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";

export const MICRO: GPT2Config = {
  name: "micro",
  n_layer: 1,
  n_head: 2,
  n_embd: 8,
  n_positions: 16,
  vocab_size: 11,
  layer_norm_epsilon: 1e-5,
};

export interface RawTensor {
  name: string;
  dtype: "F32" | "F16" | "BF16";
  shape: number[];
  values: Float32Array;
}

/** float32 → IEEE half bits (truncating; ±Inf above the range): enough for N(0, 0.02) test weights. */
function halfBits(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = ((u >>> 23) & 0xff) - 127 + 15;
  const mantissa = u & 0x7fffff;
  if (Number.isNaN(x)) return 0x7e00;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) return exp < -10 ? sign : sign | ((mantissa | 0x800000) >> (14 - exp));
  return sign | (exp << 10) | (mantissa >> 13);
}

/** A tensor's bytes in its dtype. */
function encodeValues(t: RawTensor): Uint8Array {
  if (t.dtype === "F32")
    return new Uint8Array(t.values.buffer.slice(t.values.byteOffset, t.values.byteOffset + t.values.byteLength));
  const bits =
    t.dtype === "F16"
      ? Uint16Array.from(t.values, halfBits)
      : Uint16Array.from(new Uint32Array(Float32Array.from(t.values).buffer), (u) => u >>> 16);
  return new Uint8Array(bits.buffer);
}

/** A model's seeded parameters (GPT-2's init), in checkpoint order. */
export function seededTensors(config: GPT2Config, dtype: RawTensor["dtype"] = "F32"): RawTensor[] {
  const arrays = materializeWeights(randomWeights(config, 1));
  return parameterSpecs(config).map((s) => ({ name: s.name, dtype, shape: s.shape, values: arrays.get(s.name)! }));
}

/** The micro model's seeded parameters, in checkpoint order. */
export function microTensors(dtype: RawTensor["dtype"] = "F32"): RawTensor[] {
  return seededTensors(MICRO, dtype);
}

/** The Hugging Face config.json of a config. */
export function hfConfigJson(c: GPT2Config): string {
  return JSON.stringify({
    model_type: "gpt2",
    n_layer: c.n_layer,
    n_head: c.n_head,
    n_embd: c.n_embd,
    n_positions: c.n_positions,
    vocab_size: c.vocab_size,
  });
}

export interface Encoded {
  bytes: Uint8Array;
  /** the header's JSON text and its length */
  headerText: string;
  headerLen: number;
  /** where each tensor's bytes start in the file */
  fileOffsets: Map<string, number>;
}

/** Lays tensors out back to back, the header first (its entries in the same order), as the reference writer does. */
export function encode(
  tensors: RawTensor[],
  edit: (header: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>) => void = () => {},
): Encoded {
  const header: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }> = {};
  const data = tensors.map(encodeValues);
  let offset = 0;
  tensors.forEach((t, i) => {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + data[i]!.length] };
    offset += data[i]!.length;
  });
  edit(header);
  return encodeWithHeader(
    JSON.stringify(header),
    data,
    tensors.map((t) => t.name),
  );
}

/** A file from a header text as given (duplicate keys can only be written this way) and the data chunks. */
export function encodeWithHeader(headerText: string, data: Uint8Array[], names: string[] = []): Encoded {
  const json = new TextEncoder().encode(headerText);
  const total = data.reduce((n, d) => n + d.length, 0);
  const bytes = new Uint8Array(8 + json.length + total);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
  bytes.set(json, 8);
  const fileOffsets = new Map<string, number>();
  let at = 8 + json.length;
  data.forEach((d, i) => {
    if (names[i] !== undefined) fileOffsets.set(names[i]!, at);
    bytes.set(d, at);
    at += d.length;
  });
  return { bytes, headerText, headerLen: json.length, fileOffsets };
}

/** The same bytes with the 8-byte header length replaced. */
export function withHeaderLength(bytes: Uint8Array, length: bigint): Uint8Array {
  const out = bytes.slice();
  new DataView(out.buffer).setBigUint64(0, length, true);
  return out;
}

/** The data chunks of `tensors`, for encodeWithHeader. */
export function dataOf(tensors: RawTensor[]): Uint8Array[] {
  return tensors.map(encodeValues);
}

let dirs = 0;
/**
 * A model directory under `base` (world-readable, so a test may read it as another user): config.json and
 * model.safetensors from `files` (a string or bytes each; null leaves one out).
 */
export function modelDir(base: string, files: { config?: string | null; model?: Uint8Array | null } = {}): string {
  const dir = join(base, `model-${dirs++}`);
  mkdirSync(dir);
  chmodSync(dir, 0o755);
  if (files.config !== null) writeFileSync(join(dir, "config.json"), files.config ?? hfConfigJson(MICRO));
  if (files.model !== null && files.model !== undefined) writeFileSync(join(dir, "model.safetensors"), files.model);
  return dir;
}

/** An F32 checkpoint's tensors in file order, as values (to be written again in any storage type). */
export function checkpointTensors(path: string, dtype: RawTensor["dtype"] = "F32"): RawTensor[] {
  const file = readSafetensors(path);
  const source = file.open();
  try {
    return [...file.tensors.values()]
      .sort((a, b) => a.begin - b.begin)
      .map((t) => {
        if (t.dtype !== "F32") throw new Error(`${path}: ${t.name} is ${t.dtype}, not F32`);
        const bytes = new Uint8Array(t.end - t.begin);
        source.read(bytes, file.dataStart + t.begin);
        return { name: t.name, dtype, shape: t.shape, values: new Float32Array(bytes.buffer) };
      });
  } finally {
    source.close();
  }
}

export const INDEX_FILE = "model.safetensors.index.json";

/**
 * A sharded copy of `tensors` under `base`: `config` copied from a file, shard i (`model-0000i-of-0000n.safetensors`)
 * holding shards[i]'s tensors, and an index mapping each to its shard; `index` may replace the index's text.
 */
export function shardedDir(
  base: string,
  configPath: string,
  tensors: RawTensor[],
  shards: string[][],
  index?: (map: Record<string, string>) => string,
): string {
  const dir = modelDir(base, { config: null });
  copyFileSync(configPath, join(dir, "config.json"));
  const map: Record<string, string> = {};
  shards.forEach((names, i) => {
    const file = `model-${String(i + 1).padStart(5, "0")}-of-${String(shards.length).padStart(5, "0")}.safetensors`;
    writeFileSync(join(dir, file), encode(tensors.filter((t) => names.includes(t.name))).bytes);
    for (const name of names) map[name] = file;
  });
  writeFileSync(join(dir, INDEX_FILE), index ? index(map) : JSON.stringify({ metadata: {}, weight_map: map }));
  return dir;
}
