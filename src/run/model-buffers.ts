// What placing a model on a backend takes, whichever its architecture (gpt2-buffers.ts, llama-buffers.ts): one arena
// of named regions, every weight in it (matrices and embedding tables in the weight dtype, a linear layer's matrix in
// the backend's layout of it, vectors in fp32), a preallocated KV cache per layer and sequence in the cache dtype, the
// activations for up to `maxRows` rows, and what all of it comes to before anything is allocated.
import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import { kvColumns, placedParameters, type ModelConfig } from "../model/architectures.ts";
import { StorageConverter } from "../model/dtypes.ts";
import { nameOf, numel } from "../model/safetensors.ts";
import type { ChunkVisitor, ParameterSpec } from "../model/parameters.ts";
import { DTYPE_BYTES, type DtypeName } from "../ops.ts";
import { DEFAULT_STEP_FORM, type StepForm } from "../plan.ts";
import { PASS_ROWS } from "../plans.ts";

const ALIGN = 256; // bytes: every tensor starts on a 256-byte boundary (16-byte vector loads, coalescing)
const FLOAT = 4;

export const align = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/** Lays out named regions in one allocation. */
export class Arena {
  size = 0;
  /** returns the region's offset */
  reserve(bytes: number): number {
    const at = this.size;
    this.size += align(bytes);
    return at;
  }
}

/** Named regions of one allocation by offset, and the allocation's size. */
export interface Layout<K extends string> {
  at: Record<K, number>;
  size: number;
}

/** The regions of an allocation at `base`: each one's address and bytes (to the next region, alignment included). */
export function layoutRegions<K extends string>(layout: Layout<K>, base: number): Record<K, DeviceBuffer> {
  const entries = (Object.entries(layout.at) as [K, number][]).sort((a, b) => a[1] - b[1]);
  return Object.fromEntries(
    entries.map(([name, at], i) => [name, { ptr: base + at, bytes: (entries[i + 1]?.[1] ?? layout.size) - at }]),
  ) as Record<K, DeviceBuffer>;
}

/** What a placement allocates, in bytes, before anything is allocated (what decides whether a run fits). */
export interface PlacementBytes {
  weights: number;
  cache: number;
  activations: number;
}

export const placementTotal = (p: PlacementBytes) => p.weights + p.cache + p.activations;

/** Matrices and embedding tables are stored in the weight dtype; biases and layer-norm parameters stay fp32. */
export const storedInWeightDtype = (spec: ParameterSpec) => spec.shape.length === 2;

/** Bytes of one element of `spec` as stored with weights in `dtype`. */
export const storedBytesPer = (spec: ParameterSpec, dtype: DtypeName) =>
  storedInWeightDtype(spec) ? DTYPE_BYTES[dtype] : FLOAT;

/** The parameters in one arena, in spec order: each one's offset (and the arena, for what follows them). */
export function parameterArena(specs: readonly ParameterSpec[], dtype: DtypeName) {
  const arena = new Arena();
  const offsets = new Map(specs.map((s) => [s.name, arena.reserve(numel(s.shape) * storedBytesPer(s, dtype))]));
  return { arena, offsets };
}

/**
 * Streams parameters into `buffer` at their offsets: matrices and tables converted to the weight dtype (each chunk
 * as it comes), a linear layer's matrix into the backend's own layout of it, vectors as fp32.
 */
export function uploadParameters(
  backend: Backend,
  buffer: DeviceBuffer,
  stream: (visit: ChunkVisitor) => void,
  offsets: Map<string, number>,
  dtype: DtypeName,
): void {
  const narrow = new StorageConverter(dtype);
  stream((spec, chunk, offset) => {
    const at = offsets.get(spec.name)!;
    const stored = storedInWeightDtype(spec) ? narrow.convert(chunk, () => `weight ${nameOf(spec.name)}`) : chunk;
    if (spec.linear)
      backend.uploadMatrix(buffer, { data: stored, rows: spec.shape[0]!, cols: spec.shape[1]!, first: offset }, at);
    else backend.upload(buffer, stored, at + offset * storedBytesPer(spec, dtype));
  });
}

/** The weights' bytes as stored in `dtype` (without the arena's alignment), for any architecture. */
export function storedWeightBytes(cfg: ModelConfig, dtype: DtypeName): number {
  return placedParameters(cfg).reduce((sum, s) => sum + numel(s.shape) * storedBytesPer(s, dtype), 0);
}

/**
 * A model's weights on a backend (and a rotary model's table after them), read by every session placed over them
 * — the same weights stored in the same type, as an intervention's batches are — and freed with the last of them.
 */
export class PlacedWeights {
  private holders = 1;

  constructor(
    private readonly backend: Backend,
    readonly buffer: DeviceBuffer,
    /** the positions a session reading them may reach (a rotary model's table covers these) */
    readonly positions: number,
  ) {}

  /** one more session reads them */
  hold(): this {
    this.holders++;
    return this;
  }

  /** a session that read them is done; the last frees them */
  release(): void {
    if (--this.holders === 0) this.backend.free(this.buffer);
  }
}

/** A model placed on a backend, whichever its architecture (`buffers`: its step's pointers). */
export interface Resident<Buffers> {
  buffers: Buffers;
  /** the steps it is placed for: their sequences and storage types (and plan) */
  form: StepForm;
  /** its weights, which other sessions may read too */
  weights: PlacedWeights;
  /** what was allocated, for memory accounting */
  allocations: { weights: DeviceBuffer; cache: DeviceBuffer; activations: DeviceBuffer };
  /** the activations' allocation by region (x, qkv, …, the attention's scratch, the tokens) */
  activationRegions: Record<string, DeviceBuffer>;
  /** the part of the weights' allocation that holds the model's parameters alone (what identifies the weights) */
  parameters: DeviceBuffer;
  free(): void;
}

/** The rows a step may have: maxRows, or by default a whole pass (PASS_ROWS, or every position held if fewer), or the batch if larger. */
export const rowsHeld = (cfg: ModelConfig, form: Pick<StepForm, "batch">, maxRows?: number) =>
  maxRows ?? Math.max(Math.min(cfg.n_positions, PASS_ROWS), form.batch);

/** What the cache's size depends on: the sequences and the cache's storage type. */
type CacheForm = Pick<StepForm, "batch" | "kv">;

/** One layer's K (or V) cache: every sequence's n_positions rows of its K/V columns in the cache dtype. */
export const layerCacheBytes = (cfg: ModelConfig, form: CacheForm) =>
  align(form.batch * cfg.n_positions * kvColumns(cfg) * DTYPE_BYTES[form.kv]);

/** KV cache bytes as allocated: 2 × n_layer × batch × n_positions × K/V columns × cache dtype bytes (each layer's K and V aligned). */
export function cacheBytes(cfg: ModelConfig, form: CacheForm = DEFAULT_STEP_FORM): number {
  return 2 * cfg.n_layer * layerCacheBytes(cfg, form);
}

/** Each layer's K and V cache, one allocation (zeroed by be_alloc's contract, cuda/runtime.h; not touched here). */
export function allocateCache(backend: Backend, cfg: ModelConfig, form: CacheForm) {
  const per = layerCacheBytes(cfg, form);
  const buffer = backend.alloc(cacheBytes(cfg, form));
  const k = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + 2 * l * per);
  const v = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + (2 * l + 1) * per);
  return { buffer, k, v };
}

/**
 * The weights a session reads: `shared` where given (placed by another session), else a buffer of `bytes` that
 * `fill` writes, freed again if filling fails (a checkpoint's bad chunk, say).
 */
export function placeWeights(
  backend: Backend,
  bytes: number,
  positions: number,
  fill: (buffer: DeviceBuffer) => void,
  shared?: PlacedWeights,
): PlacedWeights {
  if (shared) return shared.hold();
  const buffer = backend.alloc(bytes, "whole");
  try {
    fill(buffer);
  } catch (e) {
    backend.free(buffer);
    throw e;
  }
  return new PlacedWeights(backend, buffer, positions);
}

/**
 * A session's own buffers beside its weights: the cache and the activations' arena, the hold on `placed` released
 * if allocating them fails; `free` releases all three, once.
 */
export function allocateBeside<K extends string>(
  backend: Backend,
  placed: PlacedWeights,
  cfg: ModelConfig,
  form: CacheForm,
  activations: Layout<K>,
) {
  let cache: ReturnType<typeof allocateCache> | undefined;
  try {
    cache = allocateCache(backend, cfg, form);
    const acts = allocateActivations(backend, activations);
    const own = cache;
    let freed = false;
    const free = () => {
      if (freed) return;
      freed = true;
      placed.release();
      backend.free(own.buffer);
      backend.free(acts.buffer);
    };
    return { cache: own, acts, free };
  } catch (e) {
    if (cache) backend.free(cache.buffer);
    placed.release();
    throw e;
  }
}

/** Allocates the activations' arena (zeroed, and on the CPU committed only where a step writes). */
export function allocateActivations<K extends string>(backend: Backend, layout: Layout<K>) {
  const buffer = backend.alloc(layout.size);
  const regions = layoutRegions(layout, buffer.ptr);
  const pointers = Object.fromEntries(Object.entries(layout.at).map(([k, at]) => [k, buffer.ptr + (at as number)]));
  return { buffer, regions, pointers: pointers as Record<K, number> };
}
