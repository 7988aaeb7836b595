/**
 * safetensors reader: u64 little-endian header length N, N bytes of JSON header, then the data section.
 * Every header field is validated; weights come back as Float32Array (F32 viewed in place when aligned).
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import { UserError } from "../errors.ts";

/** Bytes per element of every dtype the format defines. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, F8_E4M3: 1, F8_E5M2: 1,
  I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1,
};

/** Refuse headers above this size: a corrupt length would otherwise ask for gigabytes of JSON. */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  begin: number; // byte offsets into the data section, end exclusive
  end: number;
}

export interface SafetensorsFile {
  path: string;
  bytes: Uint8Array; // the whole file
  dataStart: number; // offset of the data section within `bytes`
  tensors: Map<string, TensorInfo>;
}

export function readSafetensors(path: string): SafetensorsFile {
  let bytes: Uint8Array;
  try {
    const buf = readFileSync(path);
    bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength); // plain view: Buffer#slice would not copy
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UserError(code === "ENOENT" ? `${path}: file not found` : `${path}: cannot read (${code ?? String(e)})`);
  }
  return parseSafetensors(bytes, path);
}

/** Parses and validates a safetensors file held in memory; `path` names it in errors. */
export function parseSafetensors(bytes: Uint8Array, path: string): SafetensorsFile {
  if (bytes.byteLength < 8) {
    throw new UserError(`${path}: not a safetensors file (${bytes.byteLength} bytes, shorter than the 8-byte header length)`);
  }
  const headerLen = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (headerLen > BigInt(MAX_HEADER_BYTES)) {
    throw new UserError(`${path}: header length ${headerLen} bytes is above the ${MAX_HEADER_BYTES / 2 ** 20} MiB cap (corrupt file?)`);
  }
  const dataStart = 8 + Number(headerLen);
  if (dataStart > bytes.byteLength) {
    throw new UserError(`${path}: header length ${headerLen} runs past the end of the file (${bytes.byteLength} bytes; truncated?)`);
  }
  const header = parseHeader(bytes.subarray(8, dataStart), path);
  const dataLen = bytes.byteLength - dataStart;
  const tensors = new Map<string, TensorInfo>();
  for (const [name, entry] of Object.entries(header)) {
    if (name !== "__metadata__") tensors.set(name, parseEntry(name, entry, dataLen, path));
  }
  checkNoOverlap([...tensors.values()], path);
  return { path, bytes, dataStart, tensors };
}

function parseHeader(raw: Uint8Array, path: string): Record<string, unknown> {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
  } catch (e) {
    throw new UserError(`${path}: header is not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(header)) throw new UserError(`${path}: header is not a JSON object`);
  if (header.__metadata__ !== undefined && !isObject(header.__metadata__)) {
    throw new UserError(`${path}: __metadata__ is not a JSON object`);
  }
  return header;
}

function parseEntry(name: string, entry: unknown, dataLen: number, path: string): TensorInfo {
  const where = `${path}: tensor ${name}`;
  if (!isObject(entry)) throw new UserError(`${where}: header entry is not an object`);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (typeof dtype !== "string" || DTYPE_BYTES[dtype] === undefined) {
    throw new UserError(`${where} has unknown dtype ${JSON.stringify(dtype)}`);
  }
  if (!isIndexArray(shape)) {
    throw new UserError(`${where}: shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
  }
  if (!isIndexArray(offsets) || offsets.length !== 2) {
    throw new UserError(`${where}: data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offsets)}`);
  }
  const [begin, end] = offsets as [number, number];
  if (begin > end) throw new UserError(`${where}: data_offsets [${begin}, ${end}] have begin after end`);
  if (end > dataLen) {
    throw new UserError(`${where}: data_offsets [${begin}, ${end}] run past the end of the data section (${dataLen} bytes; truncated?)`);
  }
  const needed = numel(shape) * DTYPE_BYTES[dtype];
  if (end - begin !== needed) {
    throw new UserError(`${where}: data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ${dtype} shape ${formatShape(shape)} needs ${needed}`);
  }
  return { name, dtype, shape, begin, end };
}

/** Sorted by begin, each non-empty tensor must start at or after the furthest end seen so far. */
function checkNoOverlap(tensors: TensorInfo[], path: string): void {
  const nonEmpty = tensors.filter((t) => t.end > t.begin).sort((a, b) => a.begin - b.begin);
  let furthest: TensorInfo | undefined;
  for (const t of nonEmpty) {
    if (furthest && t.begin < furthest.end) {
      throw new UserError(
        `${path}: tensors ${furthest.name} [${furthest.begin}, ${furthest.end}] and ${t.name} [${t.begin}, ${t.end}] overlap`,
      );
    }
    if (!furthest || t.end > furthest.end) furthest = t;
  }
}

/** Dtypes a weight may have; each is widened to float32. */
const WEIGHT_DTYPES = new Set(["F32", "F16", "BF16"]);

/** A tensor's elements widened to float32. F32 is a zero-copy view when its offset is 4-byte aligned. */
export function tensorFloat32(file: SafetensorsFile, t: TensorInfo): Float32Array {
  if (!WEIGHT_DTYPES.has(t.dtype)) {
    throw new UserError(`${file.path}: tensor ${t.name} has dtype ${t.dtype}; weights must be F32, F16 or BF16`);
  }
  const n = numel(t.shape);
  const [buffer, offset] = alignedSource(file, t, DTYPE_BYTES[t.dtype]!);
  if (t.dtype === "F32") return new Float32Array(buffer, offset, n);
  const halves = new Uint16Array(buffer, offset, n);
  return t.dtype === "F16" ? f16ToF32(halves) : bf16ToF32(halves);
}

/** [buffer, byte offset] of the tensor: the file's own buffer when aligned for `align`-byte elements, else a copy. */
function alignedSource(file: SafetensorsFile, t: TensorInfo, align: number): [ArrayBufferLike, number] {
  const start = file.bytes.byteOffset + file.dataStart + t.begin;
  if (start % align === 0) return [file.bytes.buffer, start];
  return [new Uint8Array(file.bytes.subarray(file.dataStart + t.begin, file.dataStart + t.end)).buffer, 0]; // a copy
}

let f16Table: Float32Array | undefined;

/** All 65536 half-precision values as float32, built on first use. */
function halfTable(): Float32Array {
  if (f16Table) return f16Table;
  f16Table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0) f16Table[h] = sign * 2 ** -14 * (frac / 1024); // zero / subnormal
    else if (exp === 31) f16Table[h] = frac ? NaN : sign * Infinity;
    else f16Table[h] = sign * 2 ** (exp - 15) * (1 + frac / 1024);
  }
  return f16Table;
}

function f16ToF32(src: Uint16Array): Float32Array {
  const table = halfTable();
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = table[src[i]!]!;
  return out;
}

/** bfloat16 is the top half of a float32. */
function bf16ToF32(src: Uint16Array): Float32Array {
  const bits = new Uint32Array(src.length);
  for (let i = 0; i < src.length; i++) bits[i] = src[i]! << 16;
  return new Float32Array(bits.buffer);
}

/** A float32 tensor to write: its name, its shape and its elements, row-major. */
export interface F32Tensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/**
 * Writes F32 tensors as a safetensors file, back to back in the given order; the JSON header is space-padded
 * so the data section starts 8-byte aligned, as the reference writer does. Streams tensor by tensor.
 */
export function writeSafetensors(path: string, tensors: readonly F32Tensor[]): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const t of tensors) {
    if (numel(t.shape) !== t.data.length) throw new RangeError(`safetensors: ${t.name} has ${t.data.length} elements, shape ${formatShape(t.shape)} needs ${numel(t.shape)}`);
    header[t.name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  const text = new TextEncoder().encode(JSON.stringify(header));
  const json = new Uint8Array(Math.ceil(text.length / 8) * 8).fill(0x20); // " " padding
  json.set(text);
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(json.length), true);
  const fd = openSync(path, "w");
  try {
    writeSync(fd, prefix);
    writeSync(fd, json);
    for (const t of tensors) writeSync(fd, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)); // little-endian hosts
  } finally {
    closeSync(fd);
  }
}

export function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isIndexArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0);
}
