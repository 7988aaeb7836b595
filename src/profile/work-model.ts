// Work model of the decode plan: the FLOPs and fewest bytes of every op, read off the plan's ops (each op
// carries its work, from its row in the op table, src/ops.ts), and the regime of an op from its measured time.
import type { Peaks } from "../backends/instrument.ts";
import type { ModelConfig } from "../model/architectures.ts";
import type { OpFamily, Work } from "../ops.ts";
import { DEFAULT_STEP_FORM, type PlanOp, type StepForm } from "../plan.ts";
import { passesOf, planShapeOf } from "../plans.ts";

export interface OpWork extends Work {
  family: OpFamily;
  label: string;
  layer: number | null;
}

/** The work of each op of a step whose first row is at position `pos`, in plan order. */
export function opsWork(ops: readonly PlanOp[], pos: number): OpWork[] {
  return ops.map((o) => ({ family: o.family, label: o.label, layer: o.layer, ...o.work(pos) }));
}

/**
 * The work of every op of one step of T new rows of each sequence, every sequence's first row at position
 * `pos`, in plan order; `form`: the plan, sequences and storage types.
 */
export function stepWork(cfg: ModelConfig, T: number, pos: number, form: StepForm = DEFAULT_STEP_FORM): OpWork[] {
  if (!Number.isInteger(T) || T < 1) throw new RangeError(`step rows T must be a positive integer, got ${T}`);
  if (!Number.isInteger(pos) || pos < 0)
    throw new RangeError(`step position must be a non-negative integer, got ${pos}`);
  if (pos + T > cfg.n_positions) {
    throw new RangeError(`rows [${pos}, ${pos + T}) exceed ${cfg.name}'s ${cfg.n_positions} positions`);
  }
  return opsWork(planShapeOf(cfg, T, form), pos);
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
export function cachedStepWork(cfg: ModelConfig, context: number, form: StepForm = DEFAULT_STEP_FORM): OpWork[] {
  return stepWork(cfg, 1, context, form);
}

/** The same token without a cache: the whole sequence of context + 1 rows recomputed from position 0, in passes of at most PASS_ROWS rows (Session.passes: each reads the weights), unfused in either plan. */
export function uncachedStepWork(cfg: ModelConfig, context: number, form: StepForm = DEFAULT_STEP_FORM): OpWork[] {
  return passesOf(context + 1).flatMap(({ T, pos }) => stepWork(cfg, T, pos, form));
}

/** Uncached FLOPs / cached FLOPs for the token after `context` tokens (the same in either plan). */
export function flopReduction(cfg: ModelConfig, context: number): number {
  return sumWork(uncachedStepWork(cfg, context)).flops / sumWork(cachedStepWork(cfg, context)).flops;
}

export type Regime = "launch-bound" | "memory-bound" | "compute-bound";

/** Within this factor of the measured launch floor an op counts as launch-bound. */
export const LAUNCH_BOUND_FACTOR = 2;

/**
 * The regime of an op that took `median_us` (device time) for `work`:
 * - launch-bound when median_us ≤ LAUNCH_BOUND_FACTOR × launchFloorUs (the measured cost of dispatching
 *   one op in its launch mode — LaunchMode.floorUs in src/run/launch-modes.ts): the op costs about what
 *   launching it costs, so removing launches (a graph, fusion) is what would make it cheaper;
 * - otherwise memory-bound or compute-bound by which roofline term (bytes / peak bandwidth or
 *   FLOPs / peak FLOP rate) is larger.
 * An op whose roofline time is below the floor but whose measured time is far above it is NOT called
 * launch-bound: it runs that long on the device for reasons of its own (its achieved share of the
 * peak says how far from the roofline it is), and no launch mechanism would recover that time.
 */
export function classifyRegime(
  median_us: number,
  work: Work,
  peaks: Pick<Peaks, "flops_per_s" | "bytes_per_s">,
  launchFloorUs: number,
): Regime {
  if (median_us <= LAUNCH_BOUND_FACTOR * launchFloorUs) return "launch-bound";
  const computeSeconds = work.flops / peaks.flops_per_s;
  const memorySeconds = work.bytes / peaks.bytes_per_s;
  return memorySeconds >= computeSeconds ? "memory-bound" : "compute-bound";
}
