// Work model of the decode plan: FLOPs and fewest bytes of every op, from the config and the step's shape.
//
// A step runs T new rows whose first position is `pos` (cuda/ops.h). Counting rules:
// - a multiply-add is 2 FLOPs; an add, multiply, compare, exp or tanh is 1 FLOP;
// - layernorm is 8 FLOPs per element (mean 1, variance 3, normalise 2, scale and shift 2);
// - gelu_new is 8 FLOPs per element (tanh counted as one); softmax is 5 FLOPs per score
//   (scale, max, exp, sum, divide);
// - bytes are the fewest that must cross memory, fp32: each weight read once, each activation read
//   once and written once, each KV cache row read once; the 16-byte position state is ignored.
import type { GPT2Config } from "../model/config.ts";
import type { OpFamily, OpWork, Work } from "./types.ts";

const BYTES_PER_FLOAT = 4;
const BYTES_PER_TOKEN_ID = 4;
const LAYERNORM_FLOPS_PER_ELEMENT = 8;
const GELU_FLOPS_PER_ELEMENT = 8;
const SOFTMAX_FLOPS_PER_SCORE = 5;
const MLP_EXPANSION = 4;

interface Counts {
  flops: number;
  /** floats of activations read or written (not weights, not KV cache) */
  activation_floats: number;
  weight_floats: number;
  kv_floats: number;
  /** other bytes (token ids) */
  extra_bytes?: number;
}

function op(family: OpFamily, label: string, layer: number | null, c: Counts): OpWork {
  const weight_bytes = c.weight_floats * BYTES_PER_FLOAT;
  const kv_bytes = c.kv_floats * BYTES_PER_FLOAT;
  const bytes = c.activation_floats * BYTES_PER_FLOAT + weight_bytes + kv_bytes + (c.extra_bytes ?? 0);
  return { family, label, layer, flops: c.flops, bytes, weight_bytes, kv_bytes };
}

/** out (T, C) = wte[seq[pos + t]] + wpe[pos + t]: reads T rows of each table and T token ids. */
function embedWork(C: number, T: number): OpWork {
  return op("embed", "embed", null, {
    flops: T * C,
    activation_floats: T * C,
    weight_floats: 2 * T * C,
    kv_floats: 0,
    extra_bytes: T * BYTES_PER_TOKEN_ID,
  });
}

function layernormWork(label: string, layer: number | null, C: number, T: number): OpWork {
  return op("layernorm", label, layer, {
    flops: LAYERNORM_FLOPS_PER_ELEMENT * T * C,
    activation_floats: 2 * T * C,
    weight_floats: 2 * C,
    kv_floats: 0,
  });
}

/** out (T, OC) = inp (T, IC) @ W (IC, OC) + b (OC). */
function linearWork(label: string, layer: number, IC: number, OC: number, T: number): OpWork {
  return op("linear", label, layer, {
    flops: 2 * T * IC * OC + T * OC,
    activation_floats: T * IC + T * OC,
    weight_floats: IC * OC + OC,
    kv_floats: 0,
  });
}

/** Copies the step's T keys and T values from qkv into the caches. */
function kvAppendWork(label: string, layer: number, C: number, T: number): OpWork {
  return op("kv_append", label, layer, { flops: 0, activation_floats: 2 * T * C, weight_floats: 0, kv_floats: 2 * T * C });
}

/** Keys seen by the T new queries: query t attends to positions [0, pos + t]. */
export function attendedKeys(T: number, pos: number): number {
  return T * pos + (T * (T + 1)) / 2;
}

/** QK^T and AV over every head (2 multiply-adds per key per channel) plus the softmax; reads q and cache rows [0, pos + T). */
function attentionWork(label: string, layer: number, C: number, n_head: number, T: number, pos: number): OpWork {
  const keys = attendedKeys(T, pos);
  return op("attention", label, layer, {
    flops: 2 * 2 * C * keys + SOFTMAX_FLOPS_PER_SCORE * n_head * keys,
    activation_floats: 2 * T * C,
    weight_floats: 0,
    kv_floats: 2 * (pos + T) * C,
  });
}

function geluWork(label: string, layer: number, N: number): OpWork {
  return op("gelu", label, layer, { flops: GELU_FLOPS_PER_ELEMENT * N, activation_floats: 2 * N, weight_floats: 0, kv_floats: 0 });
}

function residualWork(label: string, layer: number, N: number): OpWork {
  return op("residual", label, layer, { flops: N, activation_floats: 3 * N, weight_floats: 0, kv_floats: 0 });
}

/** logits (V) = last row (C) @ wte^T: the LM head reads the whole tied embedding once. */
function lmHeadWork(C: number, V: number): OpWork {
  return op("lm_head", "lm_head", null, { flops: 2 * C * V, activation_floats: C + V, weight_floats: V * C, kv_floats: 0 });
}

function argmaxWork(V: number): OpWork {
  return op("argmax", "argmax", null, {
    flops: V,
    activation_floats: V,
    weight_floats: 0,
    kv_floats: 0,
    extra_bytes: BYTES_PER_TOKEN_ID,
  });
}

function blockWork(cfg: GPT2Config, layer: number, T: number, pos: number): OpWork[] {
  const C = cfg.n_embd;
  const H = MLP_EXPANSION * C;
  const h = `h${layer}`;
  return [
    layernormWork(`${h}.ln_1`, layer, C, T),
    linearWork(`${h}.attn.c_attn`, layer, C, 3 * C, T),
    kvAppendWork(`${h}.attn.kv_append`, layer, C, T),
    attentionWork(`${h}.attn.attend`, layer, C, cfg.n_head, T, pos),
    linearWork(`${h}.attn.c_proj`, layer, C, C, T),
    residualWork(`${h}.attn.residual`, layer, T * C),
    layernormWork(`${h}.ln_2`, layer, C, T),
    linearWork(`${h}.mlp.c_fc`, layer, C, H, T),
    geluWork(`${h}.mlp.gelu`, layer, T * H),
    linearWork(`${h}.mlp.c_proj`, layer, H, C, T),
    residualWork(`${h}.mlp.residual`, layer, T * C),
  ];
}

/** The work of every op of one step of T new rows starting at position `pos`, in plan order. */
export function stepWork(cfg: GPT2Config, T: number, pos: number): OpWork[] {
  if (!Number.isInteger(T) || T < 1) throw new RangeError(`step rows T must be a positive integer, got ${T}`);
  if (!Number.isInteger(pos) || pos < 0) throw new RangeError(`step position must be a non-negative integer, got ${pos}`);
  if (pos + T > cfg.n_positions) {
    throw new RangeError(`rows [${pos}, ${pos + T}) exceed ${cfg.name}'s ${cfg.n_positions} positions`);
  }
  const blocks = Array.from({ length: cfg.n_layer }, (_, layer) => blockWork(cfg, layer, T, pos));
  return [
    embedWork(cfg.n_embd, T),
    ...blocks.flat(),
    layernormWork("ln_f", null, cfg.n_embd, T),
    lmHeadWork(cfg.n_embd, cfg.vocab_size),
    argmaxWork(cfg.vocab_size),
  ];
}

export function sumWork(ops: readonly Work[]): Work {
  const total: Work = { flops: 0, bytes: 0, weight_bytes: 0, kv_bytes: 0 };
  for (const w of ops) {
    total.flops += w.flops;
    total.bytes += w.bytes;
    total.weight_bytes += w.weight_bytes;
    total.kv_bytes += w.kv_bytes;
  }
  return total;
}

/** One decode step with a KV cache holding `context` tokens: T = 1 at position `context`. */
export function cachedStepWork(cfg: GPT2Config, context: number): OpWork[] {
  return stepWork(cfg, 1, context);
}

/** The same token without a cache: the whole sequence of context + 1 rows recomputed from position 0. */
export function uncachedStepWork(cfg: GPT2Config, context: number): OpWork[] {
  return stepWork(cfg, context + 1, 0);
}

/** Uncached FLOPs / cached FLOPs for the token after `context` tokens. */
export function flopReduction(cfg: GPT2Config, context: number): number {
  return sumWork(uncachedStepWork(cfg, context)).flops / sumWork(cachedStepWork(cfg, context)).flops;
}

export type Regime = "launch-bound" | "memory-bound" | "compute-bound";

export interface Peaks {
  flops_per_s: number;
  bytes_per_s: number;
}

/** Time at the roofline: the larger of the compute time and the memory time at the measured peaks, in µs. */
export function rooflineUs(work: Work, peaks: Peaks): number {
  return Math.max(work.flops / peaks.flops_per_s, work.bytes / peaks.bytes_per_s) * 1e6;
}

/** Within this factor of the measured launch floor an op counts as launch-bound. */
export const LAUNCH_BOUND_FACTOR = 2;

/**
 * The regime of an op that took `median_us` (device time) for `work`:
 * - launch-bound when median_us ≤ LAUNCH_BOUND_FACTOR × launchFloorUs (the measured cost of dispatching
 *   one op — src/profile/summary.ts launchFloorUs: eager host issue time per kernel on a GPU, time between
 *   ops per op on the CPU): the op costs about what launching it costs, so removing
 *   launches (a graph, fusion) is what would make it cheaper;
 * - otherwise memory-bound or compute-bound by which roofline term (bytes / peak bandwidth or
 *   FLOPs / peak FLOP rate) is larger.
 * An op whose roofline time is below the floor but whose measured time is far above it is NOT called
 * launch-bound: it runs that long on the device for reasons of its own (its achieved share of the
 * peak says how far from the roofline it is), and no launch mechanism would recover that time.
 */
export function classifyRegime(median_us: number, work: Work, peaks: Peaks, launchFloorUs: number): Regime {
  if (median_us <= LAUNCH_BOUND_FACTOR * launchFloorUs) return "launch-bound";
  const computeSeconds = work.flops / peaks.flops_per_s;
  const memorySeconds = work.bytes / peaks.bytes_per_s;
  return memorySeconds >= computeSeconds ? "memory-bound" : "compute-bound";
}
