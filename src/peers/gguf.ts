/**
 * GGUF writer (version 3, little-endian), the format llama.cpp loads (ggml's docs/gguf.md; gguf-py's constants):
 *   magic "GGUF" · u32 version · u64 tensor count · u64 metadata count
 *   metadata: key (u64 length + UTF-8) · u32 value type · value (arrays: u32 element type · u64 count · elements)
 *   tensor infos: name · u32 n_dims · u64 dims (ggml order: ne[0], the contiguous one, first) · u32 ggml type · u64 offset
 *   padding to the alignment, then each tensor's data at its offset (a multiple of the alignment) from there.
 * The tensors' elements are streamed to the file in order, chunk by chunk, so a model never sits in memory.
 */
import { closeSync, openSync, writeSync } from "node:fs";

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
export const GGML_TYPE_F32 = 0;

/** gguf-py's GGUFValueType. */
export const GGUFValueType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;

export type ScalarKind = "u32" | "i32" | "f32" | "u64" | "bool" | "string";
export type GGUFValue =
  | { kind: Exclude<ScalarKind, "string">; value: number | boolean }
  | { kind: "string"; value: string }
  | { kind: "array"; of: ScalarKind; values: readonly (number | string | boolean)[] };

export interface GGUFTensorInfo {
  name: string;
  /** ggml order: dims[0] is the contiguous dimension (a row-major (rows, cols) array is [cols, rows]) */
  dims: number[];
}

const TYPE_OF: Record<ScalarKind, number> = {
  u32: GGUFValueType.UINT32,
  i32: GGUFValueType.INT32,
  f32: GGUFValueType.FLOAT32,
  u64: GGUFValueType.UINT64,
  bool: GGUFValueType.BOOL,
  string: GGUFValueType.STRING,
};

/** Little-endian bytes appended to a growing buffer. */
class ByteSink {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private reserve(n: number): number {
    if (this.length + n > this.buf.length) {
      const bigger = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
      bigger.set(this.buf.subarray(0, this.length));
      this.buf = bigger;
      this.view = new DataView(bigger.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  // each writer reserves first: reserving may replace this.buf and this.view
  u8(v: number) {
    const at = this.reserve(1);
    this.view.setUint8(at, v);
  }
  u32(v: number) {
    const at = this.reserve(4);
    this.view.setUint32(at, v, true);
  }
  i32(v: number) {
    const at = this.reserve(4);
    this.view.setInt32(at, v, true);
  }
  f32(v: number) {
    const at = this.reserve(4);
    this.view.setFloat32(at, v, true);
  }
  u64(v: number) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`gguf: ${v} is not a u64 this writer can hold`);
    const at = this.reserve(8);
    this.view.setBigUint64(at, BigInt(v), true);
  }
  string(s: string) {
    const bytes = new TextEncoder().encode(s);
    this.u64(bytes.length);
    const at = this.reserve(bytes.length);
    this.buf.set(bytes, at);
  }
  zeros(n: number) {
    const at = this.reserve(n);
    this.buf.fill(0, at, this.length);
  }
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.length);
  }
}

function scalar(out: ByteSink, kind: ScalarKind, v: number | string | boolean): void {
  switch (kind) {
    case "u32":
      out.u32(v as number);
      return;
    case "i32":
      out.i32(v as number);
      return;
    case "f32":
      out.f32(v as number);
      return;
    case "u64":
      out.u64(v as number);
      return;
    case "bool":
      out.u8(v ? 1 : 0);
      return;
    case "string":
      out.string(v as string);
      return;
  }
}

function metadataValue(out: ByteSink, v: GGUFValue): void {
  if (v.kind === "array") {
    out.u32(GGUFValueType.ARRAY);
    out.u32(TYPE_OF[v.of]);
    out.u64(v.values.length);
    for (const x of v.values) scalar(out, v.of, x);
    return;
  }
  out.u32(TYPE_OF[v.kind]);
  scalar(out, v.kind, v.value);
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;
const elements = (dims: readonly number[]) => dims.reduce((a, b) => a * b, 1);

/**
 * Writes `tensors` (all F32) and `metadata` to `path`: the header, then every element `produce` emits, in the
 * tensors' order (row-major in the dims' reverse order), each tensor padded to the alignment. general.alignment
 * is written when it is not the default 32, as gguf-py does. Returns the file's size in bytes. Little-endian hosts.
 */
export function writeGGUF(
  path: string,
  metadata: readonly [string, GGUFValue][],
  tensors: readonly GGUFTensorInfo[],
  produce: (emit: (chunk: Float32Array) => void) => void,
  alignment = GGUF_DEFAULT_ALIGNMENT,
): number {
  if (!Number.isInteger(alignment) || alignment < 1 || alignment % 8 !== 0)
    throw new RangeError(`gguf: alignment ${alignment} must be a positive multiple of 8`);
  const kv: [string, GGUFValue][] = [...metadata];
  if (alignment !== GGUF_DEFAULT_ALIGNMENT) kv.push(["general.alignment", { kind: "u32", value: alignment }]);
  const keys = new Set<string>();
  for (const [k] of kv) {
    if (keys.has(k)) throw new RangeError(`gguf: metadata key ${k} appears twice`);
    keys.add(k);
  }

  const head = new ByteSink();
  head.u32(GGUF_MAGIC);
  head.u32(GGUF_VERSION);
  head.u64(tensors.length);
  head.u64(kv.length);
  for (const [key, value] of kv) {
    head.string(key);
    metadataValue(head, value);
  }
  let end = 0;
  const sizes = tensors.map((t) => {
    if (t.dims.length < 1 || t.dims.length > 4 || t.dims.some((d) => !Number.isInteger(d) || d < 1)) {
      throw new RangeError(`gguf: tensor ${t.name} has dims [${t.dims.join(", ")}] (1 to 4 positive sizes)`);
    }
    head.string(t.name);
    head.u32(t.dims.length);
    for (const d of t.dims) head.u64(d);
    head.u32(GGML_TYPE_F32);
    head.u64(end);
    const bytes = elements(t.dims) * 4;
    end = alignUp(end + bytes, alignment);
    return bytes;
  });
  head.zeros(alignUp(head.length, alignment) - head.length);

  const fd = openSync(path, "w");
  try {
    writeSync(fd, head.bytes());
    const data = new TensorDataWriter(fd, sizes, alignment);
    produce((chunk) => data.write(chunk));
    data.finish(tensors);
    return head.length + end;
  } finally {
    closeSync(fd);
  }
}

/** Lays streamed elements into the tensors in order, padding each to the alignment. */
class TensorDataWriter {
  private tensor = 0;
  private filled = 0;

  constructor(
    private readonly fd: number,
    private readonly sizes: readonly number[],
    private readonly alignment: number,
  ) {}

  write(chunk: Float32Array): void {
    let bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (bytes.length > 0) {
      if (this.tensor >= this.sizes.length) throw new RangeError("gguf: more data than the tensors hold");
      const take = Math.min(bytes.length, this.sizes[this.tensor]! - this.filled);
      writeSync(this.fd, bytes.subarray(0, take));
      bytes = bytes.subarray(take);
      this.filled += take;
      if (this.filled === this.sizes[this.tensor]) this.nextTensor();
    }
  }

  private nextTensor(): void {
    const pad = alignUp(this.filled, this.alignment) - this.filled;
    if (pad) writeSync(this.fd, new Uint8Array(pad));
    this.tensor++;
    this.filled = 0;
  }

  finish(tensors: readonly GGUFTensorInfo[]): void {
    if (this.tensor < this.sizes.length) {
      const t = tensors[this.tensor]!;
      throw new RangeError(
        `gguf: tensor ${t.name} got ${this.filled / 4} elements, its dims need ${this.sizes[this.tensor]! / 4}`,
      );
    }
  }
}
