// Puts a model on a backend for `batch` sequences: every weight in one arena (matrices and embedding tables in
// the weight dtype, vectors in fp32), a preallocated KV cache per layer and sequence in the cache dtype, the
// activations for up to `maxRows` rows, and each sequence's tokens and position that the kernels read from memory.
import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import { kvColumns, placedParameters, type ModelConfig } from "../model/architectures.ts";
import type { GPT2Config } from "../model/config.ts";
import { StorageConverter } from "../model/dtypes.ts";
import { nameOf, numel } from "../model/safetensors.ts";
import { parameterSpecs, type ChunkVisitor, type GPT2Weights, type ParameterSpec } from "../model/weights.ts";
import { DTYPE_BYTES, dtypeOf, STATE_INTS, type DtypeName } from "../ops.ts";
import { DEFAULT_STEP_FORM, dtypeCodes, type ModelBuffers, type StepForm } from "../plan.ts";
import { PASS_ROWS } from "../plans.ts";

const ALIGN = 256; // bytes: every tensor starts on a 256-byte boundary (16-byte vector loads, coalescing)
const FLOAT = 4;
const INT32 = 4;

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

/** The weights' bytes as stored in `dtype` (without the arena's alignment), for any architecture. */
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
    if (!storedInWeightDtype(spec)) return backend.upload(buffer, chunk, at + offset * FLOAT);
    const stored = narrow.convert(chunk, () => `weight ${nameOf(spec.name)}`);
    if (!spec.linear) return backend.upload(buffer, stored, at + offset * DTYPE_BYTES[dtype]);
    backend.uploadMatrix(buffer, { data: stored, rows: spec.shape[0]!, cols: spec.shape[1]!, first: offset }, at);
  });
}

export function storedWeightBytes(cfg: ModelConfig, dtype: DtypeName): number {
  return placedParameters(cfg).reduce((sum, s) => sum + numel(s.shape) * storedBytesPer(s, dtype), 0);
}

export interface ResidentModel {
  buffers: ModelBuffers;
  /** the steps it is placed for: their sequences and storage types (and plan) */
  form: StepForm;
  /** what was allocated, for memory accounting */
  allocations: { weights: DeviceBuffer; cache: DeviceBuffer; activations: DeviceBuffer };
  /** the activations' allocation by region (x, qkv, …, the attention's scratch, the tokens) */
  activationRegions: Record<string, DeviceBuffer>;
  /** the part of the weights' allocation that holds the model's parameters alone (what identifies the weights) */
  parameters: DeviceBuffer;
  free(): void;
}

/**
 * Streams the weights onto the backend (each chunk converted to its storage type and uploaded as it comes: no
 * copy of the model is held on the host), then allocates cache and activations for steps of up to maxRows rows
 * (default: n_positions, or the batch if larger).
 */
export function placeModel(
  backend: Backend,
  weights: GPT2Weights,
  form: StepForm = DEFAULT_STEP_FORM,
  maxRows?: number,
): ResidentModel {
  const cfg = weights.config;
  const rows = rowsHeld(cfg, form, maxRows);
  const { offsets, size } = weightLayout(cfg, form);
  const weightBuffer = backend.alloc(size);
  try {
    uploadParameters(backend, weightBuffer, (visit) => weights.stream(visit), offsets, form.weights);
  } catch (e) {
    backend.free(weightBuffer);
    throw e;
  }
  const w = (name: string) => weightBuffer.ptr + offsets.get(name)!;
  const pair = (prefix: string) => ({ weight: w(`${prefix}.weight`), bias: w(`${prefix}.bias`) });

  const cache = allocateCache(backend, cfg, form);
  const acts = allocateActivations(backend, activationLayout(backend, cfg, rows, form.batch));

  const buffers: ModelBuffers = {
    config: cfg,
    batch: form.batch,
    dtypes: dtypeCodes(form),
    wte: w("wte.weight"),
    wpe: w("wpe.weight"),
    layers: Array.from({ length: cfg.n_layer }, (_, i) => ({
      ln_1: pair(`h.${i}.ln_1`),
      c_attn: pair(`h.${i}.attn.c_attn`),
      attn_c_proj: pair(`h.${i}.attn.c_proj`),
      ln_2: pair(`h.${i}.ln_2`),
      c_fc: pair(`h.${i}.mlp.c_fc`),
      mlp_c_proj: pair(`h.${i}.mlp.c_proj`),
    })),
    ln_f: pair("ln_f"),
    kCache: cache.k,
    vCache: cache.v,
    ...acts.pointers,
    next: acts.pointers.seq,
    maxRows: rows,
  };
  return {
    buffers,
    form,
    allocations: { weights: weightBuffer, cache: cache.buffer, activations: acts.buffer },
    activationRegions: acts.regions,
    parameters: weightBuffer,
    free() {
      backend.free(weightBuffer);
      backend.free(cache.buffer);
      backend.free(acts.buffer);
    },
  };
}

/** The rows a step may have: maxRows, or by default a whole pass (PASS_ROWS, or every position held if fewer), or the batch if larger. */
export const rowsHeld = (cfg: ModelConfig, form: Pick<StepForm, "batch">, maxRows?: number) =>
  maxRows ?? Math.max(Math.min(cfg.n_positions, PASS_ROWS), form.batch);

/** GPT-2's weights in one arena: each parameter's offset, matrices in the weight dtype. */
function weightLayout(cfg: GPT2Config, form: Pick<StepForm, "weights">) {
  const { arena, offsets } = parameterArena(parameterSpecs(cfg), form.weights);
  return { offsets, size: arena.size };
}

/** What placeModel allocates for these steps, computed from the same layouts. */
export function gpt2PlacementBytes(
  backend: Backend,
  cfg: GPT2Config,
  form: StepForm,
  maxRows?: number,
): PlacementBytes {
  return {
    weights: weightLayout(cfg, form).size,
    cache: cacheBytes(cfg, form),
    activations: activationLayout(backend, cfg, rowsHeld(cfg, form, maxRows), form.batch).size,
  };
}

/** What the cache's size depends on: the sequences and the cache's storage type. */
type CacheForm = Pick<StepForm, "batch" | "kv">;

/** One layer's K (or V) cache: every sequence's n_positions rows of its K/V columns in the cache dtype. */
export const layerCacheBytes = (cfg: ModelConfig, form: CacheForm) =>
  align(form.batch * cfg.n_positions * kvColumns(cfg) * DTYPE_BYTES[form.kv]);

/** KV cache bytes as allocated: 2 × n_layer × batch × n_positions × K/V columns × cache dtype bytes (each layer's K and V aligned). */
export function cacheBytes(cfg: ModelConfig, form: CacheForm = DEFAULT_STEP_FORM): number {
  return 2 * cfg.n_layer * layerCacheBytes(cfg, form);
}

function allocateCache(backend: Backend, cfg: GPT2Config, form: CacheForm) {
  const per = layerCacheBytes(cfg, form);
  const buffer = backend.alloc(cacheBytes(cfg, form)); // zeroed by be_alloc's contract (cuda/runtime.h), not touched here
  const k = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + 2 * l * per);
  const v = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + (2 * l + 1) * per);
  return { buffer, k, v };
}

/** Allocates the activations' arena (zeroed, and on the CPU committed only where a step writes). */
export function allocateActivations<K extends string>(backend: Backend, layout: Layout<K>) {
  const buffer = backend.alloc(layout.size);
  const regions = layoutRegions(layout, buffer.ptr);
  const pointers = Object.fromEntries(Object.entries(layout.at).map(([k, at]) => [k, buffer.ptr + (at as number)]));
  return { buffer, regions, pointers: pointers as Record<K, number> };
}

function activationLayout(backend: Backend, cfg: GPT2Config, rows: number, batch: number) {
  const C = cfg.n_embd;
  const arena = new Arena();
  const at = {
    x: arena.reserve(rows * C * FLOAT),
    ln: arena.reserve(rows * C * FLOAT),
    qkv: arena.reserve(rows * 3 * C * FLOAT),
    att: arena.reserve(rows * C * FLOAT),
    proj: arena.reserve(rows * C * FLOAT),
    fc: arena.reserve(rows * 4 * C * FLOAT),
    act: arena.reserve(rows * 4 * C * FLOAT),
    logits: arena.reserve(batch * cfg.vocab_size * FLOAT),
    scratch: arena.reserve(
      Math.max(
        FLOAT,
        backend.attentionScratchBytes(rows, C, cfg.n_head, cfg.n_positions),
        backend.attentionScratchBytes(1, C, cfg.n_head, cfg.n_positions),
      ),
    ),
    // every linear reads at most 4C and writes at most 4C (the MLP); the LM head and argmax span the vocabulary;
    // a step's linears have up to `rows` rows (a prefill's T rows, too, take the merging matvec when T <= 8)
    partials: arena.reserve(Math.max(FLOAT, backend.partialsBytes(rows, 4 * C, 4 * C, cfg.vocab_size))),
    seq: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    sink: arena.reserve(batch * (cfg.n_positions + 1) * INT32),
    state: arena.reserve(batch * STATE_INTS * INT32),
  };
  return { at, size: arena.size };
}

/**
 * The buffers as sequence b alone sees them: its state, tokens, logits and cache rows, as a batch of one.
 * A prefill runs one sequence at a time through such a view (its T rows use the shared activations).
 */
export function sequenceView(m: ModelBuffers, b: number): ModelBuffers {
  if (!Number.isInteger(b) || b < 0 || b >= m.batch) throw new RangeError(`sequence ${b} outside 0..${m.batch - 1}`);
  const cfg = m.config;
  const cacheRowsBytes = cfg.n_positions * cfg.n_embd * DTYPE_BYTES[dtypeOf(m.dtypes.kv)];
  return {
    ...m,
    batch: 1,
    state: m.state + b * STATE_INTS * INT32,
    seq: m.seq + b * (cfg.n_positions + 1) * INT32,
    next: m.next + b * (cfg.n_positions + 1) * INT32,
    sink: m.sink + b * (cfg.n_positions + 1) * INT32,
    logits: m.logits + b * cfg.vocab_size * FLOAT,
    kCache: m.kCache.map((p) => p + b * cacheRowsBytes),
    vCache: m.vCache.map((p) => p + b * cacheRowsBytes),
  };
}
