// Puts a model on a backend: every weight in one arena, a preallocated KV cache per layer, the activations
// for up to `maxRows` rows, and the token sequence and position that the kernels read from memory.
import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import type { GPT2Config } from "../model/config.ts";
import { numel } from "../model/safetensors.ts";
import { parameterSpecs, type GPT2Weights } from "../model/weights.ts";
import { STATE_INTS } from "../ops.ts";
import type { ModelBuffers } from "../plan.ts";

const ALIGN = 256; // bytes: every tensor starts on a 256-byte boundary (16-byte vector loads, coalescing)
const FLOAT = 4;
const INT32 = 4;

const align = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/** Lays out named regions in one allocation. */
class Arena {
  size = 0;
  /** returns the region's offset */
  reserve(bytes: number): number {
    const at = this.size;
    this.size += align(bytes);
    return at;
  }
}

export interface ResidentModel {
  buffers: ModelBuffers;
  /** what was allocated, for memory accounting */
  allocations: { weights: DeviceBuffer; cache: DeviceBuffer; activations: DeviceBuffer };
  free(): void;
}

/**
 * Streams the weights onto the backend (each chunk uploaded as it comes: no copy of the model is held on
 * the host), then allocates cache and activations for steps of up to maxRows rows (default: n_positions).
 */
export function placeModel(backend: Backend, weights: GPT2Weights, maxRows = weights.config.n_positions): ResidentModel {
  const cfg = weights.config;
  const weightArena = new Arena();
  const offsets = new Map(parameterSpecs(cfg).map((s) => [s.name, weightArena.reserve(numel(s.shape) * FLOAT)]));
  const weightBuffer = backend.alloc(weightArena.size);
  try {
    weights.stream((spec, chunk, offset) => backend.upload(weightBuffer, chunk, offsets.get(spec.name)! + offset * FLOAT));
  } catch (e) {
    backend.free(weightBuffer);
    throw e;
  }
  const w = (name: string) => weightBuffer.ptr + offsets.get(name)!;
  const pair = (prefix: string) => ({ weight: w(`${prefix}.weight`), bias: w(`${prefix}.bias`) });

  const cache = allocateCache(backend, cfg);
  const acts = allocateActivations(backend, cfg, maxRows);

  const buffers: ModelBuffers = {
    config: cfg,
    wte: w("wte.weight"),
    wpe: w("wpe.weight"),
    layers: Array.from({ length: cfg.n_layer }, (_, i) => ({
      ln_1: pair(`h.${i}.ln_1`), c_attn: pair(`h.${i}.attn.c_attn`), attn_c_proj: pair(`h.${i}.attn.c_proj`),
      ln_2: pair(`h.${i}.ln_2`), c_fc: pair(`h.${i}.mlp.c_fc`), mlp_c_proj: pair(`h.${i}.mlp.c_proj`),
    })),
    ln_f: pair("ln_f"),
    kCache: cache.k,
    vCache: cache.v,
    ...acts.pointers,
    maxRows,
  };
  return {
    buffers,
    allocations: { weights: weightBuffer, cache: cache.buffer, activations: acts.buffer },
    free() {
      backend.free(weightBuffer);
      backend.free(cache.buffer);
      backend.free(acts.buffer);
    },
  };
}

/** KV cache bytes as allocated: 2 × n_layer × n_positions × n_embd × 4 (each layer's K and V aligned). */
export function cacheBytes(cfg: GPT2Config): number {
  return 2 * cfg.n_layer * align(cfg.n_positions * cfg.n_embd * FLOAT);
}

function allocateCache(backend: Backend, cfg: GPT2Config) {
  const per = align(cfg.n_positions * cfg.n_embd * FLOAT);
  const buffer = backend.alloc(cacheBytes(cfg)); // zeroed by be_alloc's contract (cuda/runtime.h), not touched here
  const k = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + 2 * l * per);
  const v = Array.from({ length: cfg.n_layer }, (_, l) => buffer.ptr + (2 * l + 1) * per);
  return { buffer, k, v };
}

function allocateActivations(backend: Backend, cfg: GPT2Config, rows: number) {
  const C = cfg.n_embd;
  const arena = new Arena();
  const layout = {
    x: arena.reserve(rows * C * FLOAT),
    ln: arena.reserve(rows * C * FLOAT),
    qkv: arena.reserve(rows * 3 * C * FLOAT),
    att: arena.reserve(rows * C * FLOAT),
    proj: arena.reserve(rows * C * FLOAT),
    fc: arena.reserve(rows * 4 * C * FLOAT),
    act: arena.reserve(rows * 4 * C * FLOAT),
    logits: arena.reserve(cfg.vocab_size * FLOAT),
    scratch: arena.reserve(Math.max(FLOAT, backend.attentionScratchBytes(rows, C, cfg.n_head, cfg.n_positions),
      backend.attentionScratchBytes(1, C, cfg.n_head, cfg.n_positions))),
    // every linear reads at most 4C and writes at most 4C (the MLP); the LM head and argmax span the vocabulary
    partials: arena.reserve(Math.max(FLOAT, backend.partialsBytes(4 * C, 4 * C, cfg.vocab_size))),
    seq: arena.reserve((cfg.n_positions + 1) * INT32),
    state: arena.reserve(STATE_INTS * INT32),
  };
  const buffer = backend.alloc(arena.size); // zeroed, and on the CPU committed only where a step writes
  const pointers = Object.fromEntries(Object.entries(layout).map(([k, at]) => [k, buffer.ptr + at])) as Record<keyof typeof layout, number>;
  return { buffer, pointers, layout };
}
