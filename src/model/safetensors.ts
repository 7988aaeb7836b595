/**
 * safetensors reader: u64 little-endian header length N, N bytes of JSON header, then the data section.
 * The header is read and validated before any data is touched (a hostile length allocates nothing); the
 * data is then streamed tensor by tensor, in chunks, through a reusable staging buffer, widened to float32
 * and checked finite on the way, so no copy of the whole file is ever held.
 */
import { closeSync, openSync, writeSync } from "node:fs";

import { UserError, printable } from "../errors.ts";
import { closeFile, openRegularFile, readExactly, type RegularFile } from "./files.ts";

/** Bytes per element of every dtype the format defines. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  F8_E4M3: 1,
  F8_E5M2: 1,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U64: 8,
  U32: 4,
  U16: 2,
  U8: 1,
  BOOL: 1,
};

/** Refuse headers above this size (the reference implementation's cap is 100 MB): a corrupt length would ask for gigabytes. */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;
/** Elements per streamed chunk: 4 MiB of float32. */
export const CHUNK_ELEMENTS = 1 << 20;

export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  begin: number; // byte offsets into the data section, end exclusive
  end: number;
}

/** Where the bytes come from: a file opened for reading, or bytes in memory (tests). */
export interface ByteSource {
  readonly size: number;
  read(into: Uint8Array, position: number): void;
  close(): void;
}

export interface SafetensorsFile {
  path: string;
  /** file size in bytes */
  size: number;
  dataStart: number; // offset of the data section
  tensors: Map<string, TensorInfo>;
  /** opens the bytes for streaming; a file is reopened and must still be the one whose header was read */
  open(): ByteSource;
}

/** A tensor name as it may appear in a one-line message. */
export const nameOf = (name: string) => printable(name);

/** Reads and validates the header of the safetensors file at `path`; the data stays on disk until streamed. */
export function readSafetensors(path: string): SafetensorsFile {
  const file = openFile(path);
  try {
    const header = readHeader(file, path);
    const size = file.size;
    return parseHeaderBytes(header, size, path, () => reopen(path, size, header));
  } finally {
    file.close();
  }
}

/** Parses and validates a safetensors file held in memory; `path` names it in errors. */
export function parseSafetensors(bytes: Uint8Array, path: string): SafetensorsFile {
  const source = memorySource(bytes);
  return parseHeaderBytes(readHeader(source, path), bytes.byteLength, path, () => memorySource(bytes));
}

function openFile(path: string): ByteSource {
  const file: RegularFile = openRegularFile(path);
  return { size: file.size, read: (into, position) => readExactly(file, into, position), close: () => closeFile(file) };
}

function memorySource(bytes: Uint8Array): ByteSource {
  return {
    size: bytes.byteLength,
    read(into, position) {
      if (position + into.length > bytes.byteLength)
        throw new RangeError(`read past the end: ${position + into.length} > ${bytes.byteLength}`);
      into.set(bytes.subarray(position, position + into.length));
    },
    close() {},
  };
}

/** The file again, for streaming: the same size and the same header bytes, or an error (it changed on disk). */
function reopen(path: string, size: number, header: Uint8Array): ByteSource {
  const source = openFile(path);
  const again = source.size === size ? new Uint8Array(header.length) : null;
  if (again) source.read(again, 8);
  if (!again || again.some((b, i) => b !== header[i])) {
    source.close();
    throw new UserError(`${path}: the file changed on disk after its header was read`);
  }
  return source;
}

/** The 8-byte length, checked against the cap and the file's size before the header is allocated and read. */
function readHeader(source: ByteSource, path: string): Uint8Array {
  if (source.size < 8) {
    throw new UserError(
      `${path}: not a safetensors file (${source.size} bytes, shorter than the 8-byte header length)`,
    );
  }
  const lengthBytes = new Uint8Array(8);
  source.read(lengthBytes, 0);
  const headerLen = new DataView(lengthBytes.buffer).getBigUint64(0, true);
  if (headerLen > BigInt(MAX_HEADER_BYTES)) {
    throw new UserError(
      `${path}: header length ${headerLen} bytes is above the ${MAX_HEADER_BYTES / 2 ** 20} MiB cap (corrupt file?)`,
    );
  }
  if (8 + Number(headerLen) > source.size) {
    throw new UserError(
      `${path}: header length ${headerLen} runs past the end of the file (${source.size} bytes; truncated?)`,
    );
  }
  const header = new Uint8Array(Number(headerLen));
  source.read(header, 8);
  return header;
}

function parseHeaderBytes(raw: Uint8Array, size: number, path: string, open: () => ByteSource): SafetensorsFile {
  const header = parseHeader(raw, path);
  const dataStart = 8 + raw.length;
  const dataLen = size - dataStart;
  const tensors = new Map<string, TensorInfo>();
  for (const [name, entry] of Object.entries(header)) {
    if (name !== "__metadata__") tensors.set(name, parseEntry(name, entry, dataLen, path));
  }
  checkTiling([...tensors.values()], dataLen, path);
  return { path, size, dataStart, tensors, open };
}

function parseHeader(raw: Uint8Array, path: string): Record<string, unknown> {
  let header: unknown;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(raw);
    header = JSON.parse(text);
  } catch (e) {
    throw new UserError(`${path}: header is not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(header)) throw new UserError(`${path}: header is not a JSON object`);
  // JSON.parse keeps the last of two equal keys: which tensor (or offsets) the writer meant is unknowable
  const duplicate = firstDuplicateKey(text);
  if (duplicate !== null)
    throw new UserError(`${path}: header has the key ${JSON.stringify(nameOf(duplicate))} twice in one object`);
  if (header.__metadata__ !== undefined && !isObject(header.__metadata__)) {
    throw new UserError(`${path}: __metadata__ is not a JSON object`);
  }
  return header;
}

/**
 * The first key that appears twice in one object of `text` (already known to be valid JSON), or null.
 * A scan that tracks objects and arrays and reads each key where one must stand: after `{` or a `,` in an object.
 */
export function firstDuplicateKey(text: string): string | null {
  const open: Array<Set<string> | null> = []; // one key set per enclosing object, null for an array
  let keyNext = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const keys = open.at(-1);
      if (keys && keyNext) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (keys.has(key)) return key;
        keys.add(key);
        keyNext = false;
      }
      i = j;
    } else if (c === "{") {
      open.push(new Set());
      keyNext = true;
    } else if (c === "[") {
      open.push(null);
    } else if (c === "}" || c === "]") {
      open.pop();
    } else if (c === ",") {
      keyNext = open.at(-1) != null;
    }
  }
  return null;
}

function parseEntry(name: string, entry: unknown, dataLen: number, path: string): TensorInfo {
  const where = `${path}: tensor ${nameOf(name)}`;
  if (!isObject(entry)) throw new UserError(`${where}: header entry is not an object`);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (typeof dtype !== "string" || DTYPE_BYTES[dtype] === undefined) {
    throw new UserError(`${where} has unknown dtype ${printable(JSON.stringify(dtype) ?? String(dtype))}`);
  }
  if (!isIndexArray(shape)) {
    throw new UserError(
      `${where}: shape must be an array of non-negative integers, got ${printable(JSON.stringify(shape) ?? String(shape))}`,
    );
  }
  if (!isIndexArray(offsets) || offsets.length !== 2) {
    throw new UserError(
      `${where}: data_offsets must be [begin, end] non-negative integers, got ${printable(JSON.stringify(offsets) ?? String(offsets))}`,
    );
  }
  const [begin, end] = offsets as [number, number];
  if (begin > end) throw new UserError(`${where}: data_offsets [${begin}, ${end}] have begin after end`);
  if (end > dataLen) {
    throw new UserError(
      `${where}: data_offsets [${begin}, ${end}] run past the end of the data section (${dataLen} bytes; truncated?)`,
    );
  }
  const needed = numel(shape) * DTYPE_BYTES[dtype];
  if (end - begin !== needed) {
    throw new UserError(
      `${where}: data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ${dtype} shape ${formatShape(shape)} needs ${needed}`,
    );
  }
  return { name, dtype, shape, begin, end };
}

/**
 * The tensors' bytes must tile the data section exactly, as the format requires: sorted by begin, each
 * non-empty tensor starts where the one before ended, the first at 0, the last ends at the section's end.
 * Bytes two tensors share (an overlap, reported first) or no tensor owns (a hole) mean a broken or doctored
 * file. An empty tensor owns no bytes and may sit at any offset in the section.
 */
function checkTiling(tensors: TensorInfo[], dataLen: number, path: string): void {
  const nonEmpty = tensors.filter((t) => t.end > t.begin).sort((a, b) => a.begin - b.begin || a.end - b.end);
  const span = (t: TensorInfo) => `${nameOf(t.name)} [${t.begin}, ${t.end}]`;
  let furthest: TensorInfo | undefined;
  for (const t of nonEmpty) {
    if (furthest && t.begin < furthest.end)
      throw new UserError(`${path}: tensors ${span(furthest)} and ${span(t)} overlap`);
    if (!furthest || t.end > furthest.end) furthest = t;
  }
  let covered = 0;
  for (const t of nonEmpty) {
    if (t.begin > covered) {
      throw new UserError(
        `${path}: bytes [${covered}, ${t.begin}) of the data section belong to no tensor (a hole before ${span(t)})`,
      );
    }
    covered = t.end;
  }
  if (covered < dataLen) {
    throw new UserError(`${path}: bytes [${covered}, ${dataLen}) at the end of the data section belong to no tensor`);
  }
}

/** Dtypes a weight may have; each is widened to float32. */
export const WEIGHT_DTYPES: ReadonlySet<string> = new Set(["F32", "F16", "BF16"]);

/** Reusable buffers for streaming one tensor at a time: raw bytes, and float32 for widened halves. */
export class Staging {
  readonly raw = new Uint8Array(CHUNK_ELEMENTS * 4);
  readonly floats = new Float32Array(CHUNK_ELEMENTS);
}

/**
 * Streams tensor `t` of `file` from `source` as float32 chunks: `visit(chunk, offset)` gets elements
 * [offset, offset + chunk.length), valid until it returns. Every value is checked finite.
 */
export function streamTensor(
  file: SafetensorsFile,
  source: ByteSource,
  t: TensorInfo,
  staging: Staging,
  visit: (chunk: Float32Array, offset: number) => void,
): void {
  if (!WEIGHT_DTYPES.has(t.dtype)) {
    throw new UserError(
      `${file.path}: tensor ${nameOf(t.name)} has dtype ${t.dtype}; weights must be F32, F16 or BF16`,
    );
  }
  const n = numel(t.shape);
  for (let offset = 0; offset < n; offset += CHUNK_ELEMENTS)
    visit(readChunk(file, source, t, staging, offset, Math.min(CHUNK_ELEMENTS, n - offset)), offset);
}

/** Elements [offset, offset + count) of an F32/F16/BF16 tensor as float32 in `staging` (count ≤ CHUNK_ELEMENTS), checked finite. */
export function readChunk(
  file: SafetensorsFile,
  source: ByteSource,
  t: TensorInfo,
  staging: Staging,
  offset: number,
  count: number,
): Float32Array {
  const width = DTYPE_BYTES[t.dtype]!;
  source.read(staging.raw.subarray(0, count * width), file.dataStart + t.begin + offset * width);
  const chunk =
    t.dtype === "F32"
      ? new Float32Array(staging.raw.buffer, 0, count)
      : widen(t.dtype, new Uint16Array(staging.raw.buffer, 0, count), staging.floats.subarray(0, count));
  checkFinite(file, t, chunk, offset);
  return chunk;
}

/** A whole tensor as a new Float32Array (tests and small tensors; the model itself is streamed). */
export function tensorFloat32(file: SafetensorsFile, t: TensorInfo): Float32Array {
  const out = new Float32Array(numel(t.shape));
  const source = file.open();
  try {
    streamTensor(file, source, t, new Staging(), (chunk, offset) => out.set(chunk, offset));
  } finally {
    source.close();
  }
  return out;
}

/** A NaN or ±Inf anywhere in a weight would poison every logit: rejected where it is read, with its place. */
function checkFinite(file: SafetensorsFile, t: TensorInfo, chunk: Float32Array, offset: number): void {
  for (let i = 0; i < chunk.length; i++) {
    const x = chunk[i]!;
    if (x - x !== 0) {
      throw new UserError(
        `${file.path}: tensor ${nameOf(t.name)} (${t.dtype}) holds ${x} at element ${offset + i} of ${numel(t.shape)}; weights must be finite`,
      );
    }
  }
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
    if (exp === 0)
      f16Table[h] = sign * 2 ** -14 * (frac / 1024); // zero / subnormal
    else if (exp === 31) f16Table[h] = frac ? NaN : sign * Infinity;
    else f16Table[h] = sign * 2 ** (exp - 15) * (1 + frac / 1024);
  }
  return f16Table;
}

/** F16 through the table; bfloat16 is the top half of a float32. */
function widen(dtype: string, src: Uint16Array, out: Float32Array): Float32Array {
  if (dtype === "F16") {
    const table = halfTable();
    for (let i = 0; i < src.length; i++) out[i] = table[src[i]!]!;
  } else {
    const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
    for (let i = 0; i < src.length; i++) bits[i] = src[i]! << 16;
  }
  return out;
}

/** A float32 tensor to write: its name and shape (its elements come through the writer's stream). */
export interface F32TensorSpec {
  name: string;
  shape: number[];
}

/**
 * Writes F32 tensors as a safetensors file, back to back in the given order: the JSON header first (space-
 * padded so the data section starts 8-byte aligned, as the reference writer does), then every element that
 * `produce` emits, in order, chunk by chunk — the tensors are never held whole. Little-endian hosts.
 */
export function writeSafetensors(
  path: string,
  tensors: readonly F32TensorSpec[],
  produce: (emit: (chunk: Float32Array) => void) => void,
): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const t of tensors) {
    const bytes = numel(t.shape) * 4;
    header[t.name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
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
    let written = 0;
    produce((chunk) => {
      if (written + chunk.byteLength > offset)
        throw new RangeError(`safetensors: more data than the ${offset} bytes the header declares`);
      writeSync(fd, new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      written += chunk.byteLength;
    });
    if (written !== offset)
      throw new RangeError(`safetensors: ${written} bytes of data, the header declares ${offset}`);
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
