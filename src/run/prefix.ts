// Prompt caching: a prefix's keys and values kept from one request for the next that begins with the same
// tokens, so only the rest of its prompt is prefilled. Kept in host memory or in a file; a file records what the
// rows depend on (the model's config, the storage types and a hash of the resident weights) and is refused for
// any other model, storage or weights.
import { createHash } from "node:crypto";

import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import { UserError } from "../errors.ts";
import {
  familyNameIfAny,
  familyNameOf,
  kvColumns,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import { closeFile, openRegularFile, readExactly } from "../model/files.ts";
import { DTYPE_BYTES, type DtypeName } from "../ops.ts";
import type { Session } from "./session.ts";
import type { SequenceCache } from "./synthetic-fill.ts";
import { counted } from "../words.ts";

/** What a prefix's rows depend on: a restore into anything else would compute with foreign keys and values. */
export interface PrefixIdentity {
  /** the model's config as its checkpoint (or preset) gives it */
  config: ModelConfig;
  weights_dtype: DtypeName;
  kv_dtype: DtypeName;
  /** sha256 of the weights as resident (in their storage type) */
  weights_sha256: string;
}

/** A prefix's keys and values on the host: every layer's K then V rows [0, tokens.length), in the cache dtype. */
export interface KeptPrefix {
  identity: PrefixIdentity;
  tokens: number[];
  /** (layers, 2, P, row_bytes) */
  rows: Uint8Array;
  row_bytes: number;
}

const MAGIC = "DFPREFX3";
/** the formats before the hash of the whole file: DFPREFX1 had none, DFPREFX2 one of its rows alone */
const EARLIER_MAGICS = ["DFPREFX1", "DFPREFX2"];
const HEADER_AT = MAGIC.length + 4; // the magic, then the header's length (u32 LE)
const DATA_ALIGN = 64;
const MAX_HEADER_BYTES = 16 << 20; // the token list of a 131k-token prefix is under 1 MB of JSON
const HASH_CHUNK_BYTES = 64 << 20;

/** What a prefix of `session`'s cache depends on (hashing its weights: a pass over them, outside any timing). */
export function prefixIdentityOf(session: Session<ModelWeights>): PrefixIdentity {
  return {
    config: session.weights.config,
    weights_dtype: session.form.weights,
    kv_dtype: session.form.kv,
    weights_sha256: residentSha256(session.backend, session.resident.parameters),
  };
}

/** sha256 of a resident buffer, read back in chunks (the weights are not kept on the host). */
export function residentSha256(backend: Backend, buffer: DeviceBuffer): string {
  const hash = createHash("sha256");
  const chunk = new Uint8Array(Math.min(HASH_CHUNK_BYTES, buffer.bytes));
  for (let at = 0; at < buffer.bytes; at += chunk.length) {
    const part = chunk.subarray(0, Math.min(chunk.length, buffer.bytes - at));
    backend.download(buffer, part, at);
    hash.update(part);
  }
  return hash.digest("hex");
}

/** every layer's K then V: the order the rows are kept and written in */
const cacheLayers = (cache: SequenceCache) => cache.kCache.flatMap((k, l) => [k, cache.vCache[l]!]);

/** Copies rows [0, tokens.length) of one sequence's cache to the host. */
export function keepPrefix(
  backend: Backend,
  cache: SequenceCache,
  identity: PrefixIdentity,
  tokens: number[],
): KeptPrefix {
  const rowBytes = kvColumns(cache.config) * DTYPE_BYTES[identity.kv_dtype];
  const layerBytes = tokens.length * rowBytes;
  const layers = cacheLayers(cache);
  const rows = new Uint8Array(layers.length * layerBytes);
  for (const [i, ptr] of layers.entries())
    backend.download({ ptr, bytes: layerBytes }, rows.subarray(i * layerBytes, (i + 1) * layerBytes));

  return { identity, tokens: [...tokens], rows, row_bytes: rowBytes };
}

/** Bytes of the prefix's first `count` rows, every layer's K and V: what restorePrefix writes. */
export const restoredBytes = (prefix: KeptPrefix, count: number) => (prefix.rows.length / prefix.tokens.length) * count;

/** Writes the prefix's first `count` rows of every layer into one sequence's cache. */
export function restorePrefix(backend: Backend, cache: SequenceCache, prefix: KeptPrefix, count: number): void {
  if (count > prefix.tokens.length) throw new RangeError(`${count} rows of a ${prefix.tokens.length}-token prefix`);
  const layerBytes = prefix.tokens.length * prefix.row_bytes;
  cacheLayers(cache).forEach((ptr, i) => {
    const from = i * layerBytes;
    backend.upload({ ptr, bytes: layerBytes }, prefix.rows.subarray(from, from + count * prefix.row_bytes));
  });
}

/**
 * The rows of `prefix` a prompt reuses: all of them, or all but the last where the prompt is the prefix (its
 * last token is prefilled again, so the step that ends the prompt leaves its logits). The prompt must begin
 * with the prefix's tokens.
 */
export function reusedRows(
  prompt: number[],
  prefix: KeptPrefix,
  source: string,
  sequence: number | null = null,
): number {
  const P = prefix.tokens.length;
  const which = sequence === null ? "the prompt" : `sequence ${sequence + 1}'s prompt`;
  if (prompt.length < P)
    throw new UserError(
      `${which} (${counted(prompt.length, "token")}) is shorter than the ${P}-token prefix of ${source}: it must begin with the prefix`,
    );
  const at = prefix.tokens.findIndex((t, i) => prompt[i] !== t);
  if (at >= 0)
    throw new UserError(
      `${which} does not begin with the ${P}-token prefix of ${source}: token ${at + 1} is ${prompt[at]}, the prefix's is ${prefix.tokens[at]}`,
    );
  return Math.min(P, prompt.length - 1);
}

/** Refuses a prefix whose rows were computed by another model, storage type or set of weights. */
export function checkPrefixIdentity(prefix: KeptPrefix, run: PrefixIdentity, source: string): void {
  checkPrefixModel(prefix, run, source);
  const kept = prefix.identity;
  if (kept.weights_sha256 !== run.weights_sha256)
    throw new UserError(
      `${source} was saved from other weights, or on a backend that lays them out otherwise (the CPU holds its matrices out-major; sha256 ${kept.weights_sha256.slice(0, 12)}…, these are ${run.weights_sha256.slice(0, 12)}…)`,
    );
}

/**
 * Refuses a prefix of another model or storage type: what can be known before the weights are placed (and a
 * prompt is compared with its tokens). A config's name is its folder's, so a moved checkpoint keeps its prefixes.
 */
export function checkPrefixModel(
  prefix: KeptPrefix,
  run: Omit<PrefixIdentity, "weights_sha256">,
  source: string,
): void {
  const kept = prefix.identity;
  const rowBytes = kvColumns(run.config) * DTYPE_BYTES[run.kv_dtype];
  const [keptFamily, runFamily] = [familyNameOf(kept.config), familyNameOf(run.config)];
  if (keptFamily !== runFamily)
    throw new UserError(
      `${source} was saved from another model: a ${keptFamily} model (${kept.config.name}), and this is a ${runFamily} model (${run.config.name})`,
    );
  const key = firstDifferentKey(kept.config, run.config);
  if (key !== null)
    throw new UserError(
      `${source} was saved from another model: its config's ${key} is ${shownValue(kept.config, key)}, this model's ${shownValue(run.config, key)}`,
    );
  if (kept.kv_dtype !== run.kv_dtype)
    throw new UserError(
      `${source} holds a ${kept.kv_dtype} cache; this run's cache is ${run.kv_dtype} (--kv-dtype, by default --dtype)`,
    );
  if (kept.weights_dtype !== run.weights_dtype)
    throw new UserError(
      `${source} was saved with ${kept.weights_dtype} weights; this run's are ${run.weights_dtype} (--dtype)`,
    );
  if (prefix.row_bytes !== rowBytes)
    throw new UserError(`${source}'s rows are ${prefix.row_bytes} bytes; this model's cache rows are ${rowBytes}`);
}

const configValue = (cfg: ModelConfig, key: string) => (cfg as unknown as Record<string, unknown>)[key];
const shownValue = (cfg: ModelConfig, key: string) =>
  configValue(cfg, key) === undefined ? "not set" : JSON.stringify(configValue(cfg, key));

/** The first key but the name (in either config's order) whose value differs, or null. */
function firstDifferentKey(a: ModelConfig, b: ModelConfig): string | null {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => k !== "name");
  return (
    keys.find((k) => JSON.stringify(configValue(a, k) ?? null) !== JSON.stringify(configValue(b, k) ?? null)) ?? null
  );
}

interface PrefixHeader extends PrefixIdentity {
  tokens: number[];
  row_bytes: number;
  layers: number;
  /**
   * sha256 of the rest of the header's JSON, then of the rows, as written: a file changed since (a token edited, a
   * flipped byte, NaN rows) is refused, not computed with
   */
  file_sha256: string;
}

/** sha256 of a header's JSON without its hash, then of the rows. */
const fileSha256 = (headerJson: string, rows: Uint8Array) =>
  createHash("sha256").update(headerJson).update(rows).digest("hex");

/** The file's bytes: magic, header length (u32 LE), header JSON, zeros to a 64-byte boundary, the rows. */
export function encodePrefix(prefix: KeptPrefix): Uint8Array {
  const fields = {
    ...prefix.identity,
    tokens: prefix.tokens,
    row_bytes: prefix.row_bytes,
    layers: prefix.identity.config.n_layer,
  };
  // the hash goes last, so that the header without it (hashedPart) is `fields` as hashed
  const header: PrefixHeader = { ...fields, file_sha256: fileSha256(JSON.stringify(fields), prefix.rows) };
  const json = new TextEncoder().encode(JSON.stringify(header));
  const dataAt = alignUp(HEADER_AT + json.length);
  const out = new Uint8Array(dataAt + prefix.rows.length);
  out.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(out.buffer).setUint32(MAGIC.length, json.length, true);
  out.set(json, HEADER_AT);
  out.set(prefix.rows, dataAt);
  return out;
}

const alignUp = (n: number) => Math.ceil(n / DATA_ALIGN) * DATA_ALIGN;

/**
 * Reads a prefix file; anything but one this module wrote, whole and unchanged, is one line naming what is wrong.
 * The rows go into `rowsInto` where it is their size (a buffer reused across requests: a fresh one pays a page fault
 * a page). `checkHash: false` skips their hash, for a file its reader wrote and checked once already.
 */
export function readPrefixFile(path: string, opts: { rowsInto?: Uint8Array; checkHash?: boolean } = {}): KeptPrefix {
  const file = openRegularFile(path);
  try {
    const start = new Uint8Array(HEADER_AT);
    if (file.size < HEADER_AT) throw new UserError(`${path} is not a prefix file (${file.size} bytes)`);
    readExactly(file, start, 0);
    const magic = new TextDecoder().decode(start.subarray(0, MAGIC.length));
    if (EARLIER_MAGICS.includes(magic))
      throw new UserError(
        `${path} was written by an earlier generate --save-prefix (${magic}, without the hash of its header and rows): save it again`,
      );
    if (magic !== MAGIC) throw new UserError(`${path} is not a prefix file (written by generate --save-prefix)`);
    const jsonBytes = new DataView(start.buffer).getUint32(MAGIC.length, true);
    if (jsonBytes > MAX_HEADER_BYTES || HEADER_AT + jsonBytes > file.size)
      throw new UserError(`${path} is truncated: its header says ${jsonBytes} bytes, the file has ${file.size}`);
    const json = new Uint8Array(jsonBytes);
    readExactly(file, json, HEADER_AT);
    const header = parseHeader(new TextDecoder().decode(json), path);
    const dataAt = alignUp(HEADER_AT + jsonBytes);
    const dataBytes = 2 * header.layers * header.tokens.length * header.row_bytes;
    if (file.size !== dataAt + dataBytes)
      throw new UserError(
        file.size < dataAt + dataBytes
          ? `${path} is truncated: ${file.size} bytes of the ${dataAt + dataBytes} its header describes`
          : `${path} has ${file.size - dataAt - dataBytes} bytes after the rows its header describes`,
      );
    const rows = opts.rowsInto?.length === dataBytes ? opts.rowsInto : new Uint8Array(dataBytes);
    readExactly(file, rows, dataAt);
    if ((opts.checkHash ?? true) && fileSha256(hashedPart(header), rows) !== header.file_sha256)
      throw new UserError(
        `${path}: its header or rows are not the ones written (their sha256 differs from the header's file_sha256)`,
      );
    const { tokens, row_bytes, layers: _layers, file_sha256: _fileSha256, ...identity } = header;
    return { identity, tokens, rows, row_bytes };
  } finally {
    closeFile(file);
  }
}

/** The header's JSON without its hash, as encodePrefix hashed it (JSON.parse keeps the keys' order). */
function hashedPart(header: PrefixHeader): string {
  const { file_sha256: _hash, ...rest } = header;
  return JSON.stringify(rest);
}

/** The header's fields, each checked for its type (the config itself is compared, not trusted). */
function parseHeader(text: string, path: string): PrefixHeader {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new UserError(`${path}: its header is not JSON`);
  }
  const h = raw as Partial<Record<keyof PrefixHeader, unknown>>;
  const bad = (what: string) => new UserError(`${path}: its header's ${what}`);
  if (typeof h !== "object" || h === null) throw bad("is not an object");
  if (typeof h.config !== "object" || h.config === null) throw bad("config is missing");
  if (familyNameIfAny(h.config as ModelConfig) === null) throw bad("config is no model this project runs");
  const count = (v: unknown) => Number.isSafeInteger(v) && (v as number) > 0;
  if (!count(h.layers) || h.layers !== (h.config as ModelConfig).n_layer)
    throw bad("layers is not the config's n_layer");
  if (!count(h.row_bytes)) throw bad("row_bytes is not a positive integer");
  if (!Array.isArray(h.tokens) || h.tokens.length === 0 || !h.tokens.every((t) => Number.isSafeInteger(t) && t >= 0))
    throw bad("tokens are not a list of token ids");
  for (const key of ["weights_dtype", "kv_dtype"] as const)
    if (typeof h[key] !== "string" || !(h[key] in DTYPE_BYTES)) throw bad(`${key} is not f32, bf16 or f16`);
  for (const key of ["weights_sha256", "file_sha256"] as const)
    if (typeof h[key] !== "string" || !/^[0-9a-f]{64}$/.test(h[key])) throw bad(`${key} is not a sha256`);
  return h as PrefixHeader;
}
