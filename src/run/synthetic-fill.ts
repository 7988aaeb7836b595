// A KV cache filled to a long context without prefilling it: the first rows are a real prefill's, the rest are
// drawn per layer and per column from a normal distribution with the real rows' mean and spread. A decode
// step's time depends on how many rows it reads, not on their values (as with seeded weights), so a timing
// point needs only rows of the right size and distribution.
import type { Backend } from "../backends/backend.ts";
import { kvColumns, type ModelConfig } from "../model/architectures.ts";
import { bf16Value, StorageConverter } from "../model/dtypes.ts";
import { Xoshiro128ss } from "../model/parameters.ts";
import { DTYPE_BYTES, dtypeOf, type DtypeName } from "../ops.ts";

/** Real rows a synthetic fill starts from: enough for each column's mean and spread. */
export const SYNTHETIC_SAMPLE_ROWS = 64;
/** Rows drawn per layer and K/V, then written as many times as the context needs (the values do not matter to time). */
const DRAWN_ROWS = 256;

/** One sequence's cache as the plans lay it out: per layer, K and V rows of kvColumns(config) in the cache dtype. */
export interface SequenceCache {
  config: ModelConfig;
  dtypes: { kv: number };
  kCache: number[];
  vCache: number[];
}

/** rows: (n, cols) in fp32, read from a cache region of `dtype` */
function readRows(backend: Backend, at: number, n: number, cols: number, dtype: DtypeName): Float32Array {
  const bytes = n * cols * DTYPE_BYTES[dtype];
  const region = { ptr: at, bytes };
  if (dtype === "f32") {
    const out = new Float32Array(n * cols);
    backend.download(region, out);
    return out;
  }
  const raw = dtype === "f16" ? new Float16Array(n * cols) : new Uint16Array(n * cols);
  backend.download(region, raw);
  return dtype === "f16" ? Float32Array.from(raw) : Float32Array.from(raw as Uint16Array, bf16Value);
}

/** Each column's mean and standard deviation over `rows`: (n, cols). */
function columnStats(rows: Float32Array, n: number, cols: number): { mean: Float64Array; std: Float64Array } {
  const mean = new Float64Array(cols),
    std = new Float64Array(cols);
  for (let r = 0; r < n; r++) for (let c = 0; c < cols; c++) mean[c]! += rows[r * cols + c]! / n;
  for (let r = 0; r < n; r++)
    for (let c = 0; c < cols; c++) std[c]! += (rows[r * cols + c]! - mean[c]!) ** 2 / Math.max(1, n - 1);
  for (let c = 0; c < cols; c++) std[c] = Math.sqrt(std[c]!);
  return { mean, std };
}

/**
 * Writes rows [from, to) of every layer's K and V in `cache` (one sequence's view): drawn from each column's
 * normal fitted to rows [0, from), which must already hold real rows (at least SYNTHETIC_SAMPLE_ROWS of them).
 */
export function writeSyntheticRows(backend: Backend, cache: SequenceCache, from: number, to: number, seed: number) {
  if (from < SYNTHETIC_SAMPLE_ROWS)
    throw new RangeError(`a synthetic fill needs ${SYNTHETIC_SAMPLE_ROWS} real rows, got ${from}`);
  if (to > cache.config.n_positions)
    throw new RangeError(`rows up to ${to} exceed the ${cache.config.n_positions} held`);
  const cols = kvColumns(cache.config);
  const dtype = dtypeOf(cache.dtypes.kv);
  const rowBytes = cols * DTYPE_BYTES[dtype];
  const narrow = new StorageConverter(dtype);
  const rng = new Xoshiro128ss(seed);
  const drawn = new Float32Array(DRAWN_ROWS * cols);
  const noise = new Float32Array(cols);
  for (const layer of [...cache.kCache, ...cache.vCache]) {
    const { mean, std } = columnStats(readRows(backend, layer, from, cols, dtype), from, cols);
    for (let r = 0; r < DRAWN_ROWS; r++) {
      rng.fillNormal(noise, 1);
      for (let c = 0; c < cols; c++) drawn[r * cols + c] = mean[c]! + std[c]! * noise[c]!;
    }
    const stored = narrow.convert(drawn, () => "a synthetic K/V row") as Float32Array | Uint16Array | Float16Array;
    const region = { ptr: layer, bytes: to * rowBytes };
    for (let row = from; row < to; row += DRAWN_ROWS) {
      const n = Math.min(DRAWN_ROWS, to - row);
      backend.upload(region, stored.subarray(0, n * cols), row * rowBytes);
    }
  }
}
