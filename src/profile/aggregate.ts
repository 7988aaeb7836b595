// From traced steps to numbers: op aggregates (Nsight's cuda_gpu_kern_sum shape) and where a step's time
// goes (busy / idle / host issue / launch API). The sentences drawn from them are in verdicts.ts.
import type { OpInterval, TracedStep } from "../backends/instrument.ts";
import { summarize } from "../stats.ts";
import type { Breakdown, OpAggregate, StepTrace, StudyMode, TimeSplit } from "./types.ts";

const US_PER_MS = 1000;

export type OpKey = (op: OpInterval) => string;
export const byFamily: OpKey = (op) => op.family;
/** Transformer block "h3", or the op's label outside the blocks (embed, ln_f, lm_head, argmax). */
export const byLayer: OpKey = (op) => (op.layer === null ? op.label : `h${op.layer}`);
export const byKernelName: OpKey = (op) => op.name;

/**
 * Each op's time in a step (ms), in the step's op order: from the later of its start and the end of the ops
 * before it to its own end. Where ops run one after another that is the op's duration; where an op starts while
 * its predecessor still runs (graph-pdl: a kernel's record then includes its wait for the predecessor) it is the
 * op's marginal cost, so the ops sum to the step's busy time instead of double-counting the overlap.
 */
export function opTimesMs(step: TracedStep): { op: OpInterval; ms: number }[] {
  let before = Number.NEGATIVE_INFINITY;
  return [...step.ops]
    .sort((a, b) => a.index - b.index)
    .map((op) => {
      const ms = Math.max(0, op.end_us - Math.max(op.start_us, before)) / US_PER_MS;
      before = Math.max(before, op.end_us);
      return { op, ms };
    });
}

/** Ops of a step that start before the ops ahead of them have ended. */
export function overlappingOps(step: TracedStep): number {
  let before = Number.NEGATIVE_INFINITY;
  return [...step.ops]
    .sort((a, b) => a.index - b.index)
    .filter((op) => {
      const overlaps = op.start_us < before;
      before = Math.max(before, op.end_us);
      return overlaps;
    }).length;
}

/** One row per key over every op of `steps` (each at its time in its step, opTimesMs); per-call statistics; sorted by total time, descending. */
export function aggregateOps(steps: readonly StepTrace[], keyOf: OpKey): OpAggregate[] {
  const durationsByKey = new Map<string, number[]>();
  for (const { op, ms } of steps.flatMap(opTimesMs)) {
    const key = keyOf(op);
    const list = durationsByKey.get(key) ?? [];
    list.push(ms);
    durationsByKey.set(key, list);
  }
  const rows = [...durationsByKey].map(([key, durations]) => {
    const s = summarize(durations);
    const total_ms = durations.reduce((a, b) => a + b, 0);
    return {
      key,
      calls: durations.length,
      total_ms,
      mean_ms: s.mean,
      median_ms: s.median,
      min_ms: s.min,
      max_ms: s.max,
      stddev_ms: s.stddev,
      share: 0,
    };
  });
  const all_ms = rows.reduce((a, r) => a + r.total_ms, 0);
  for (const r of rows) r.share = all_ms > 0 ? r.total_ms / all_ms : 0;
  return rows.sort((a, b) => b.total_ms - a.total_ms || a.key.localeCompare(b.key));
}

/**
 * Per-family and per-layer tables of one (mode, context)'s traced steps (every step's calls), and of the median
 * step (medianStep, the one the split is of) its op time and how many of its ops overlap their predecessors.
 */
export function buildBreakdown(steps: readonly StepTrace[]): Breakdown {
  if (steps.length === 0) throw new RangeError("buildBreakdown: no steps");
  const median = medianStep(steps);
  return {
    families: aggregateOps(steps, byFamily),
    layers: aggregateOps(steps, byLayer),
    op_sum_ms: opTimesMs(median).reduce((a, t) => a + t.ms, 0),
    overlapping_ops: overlappingOps(median),
  };
}

/** Median over the steps of each family's time per step (ms). */
export function familyMsPerStep(steps: readonly StepTrace[]): Map<string, number> {
  const perStep = steps.map((s) => {
    const totals = new Map<string, number>();
    for (const { op, ms } of opTimesMs(s)) totals.set(op.family, (totals.get(op.family) ?? 0) + ms);
    return totals;
  });
  const families = new Set(perStep.flatMap((t) => [...t.keys()]));
  return new Map([...families].map((f) => [f, summarize(perStep.map((t) => t.get(f) ?? 0)).median]));
}

/** The traced steps of one mode at one context. */
export function stepsOf(steps: readonly StepTrace[], mode: StudyMode, context: number): StepTrace[] {
  return steps.filter((s) => s.mode === mode && s.context === context);
}

interface Span {
  start_us: number;
  end_us: number;
}

/** Length of the union of the intervals (overlaps counted once), in ms. */
export function unionMs(intervals: readonly Span[]): number {
  const sorted = [...intervals].sort((a, b) => a.start_us - b.start_us);
  let covered_us = 0;
  let run: Span | null = null;
  for (const i of sorted) {
    if (run && i.start_us <= run.end_us) {
      run.end_us = Math.max(run.end_us, i.end_us);
      continue;
    }
    if (run) covered_us += run.end_us - run.start_us;
    run = { start_us: i.start_us, end_us: i.end_us };
  }
  if (run) covered_us += run.end_us - run.start_us;
  return covered_us / US_PER_MS;
}

export type SplitNumbers = Omit<TimeSplit, "verdict">;

/**
 * Where one step's time goes. The step spans from its first host or op event to its last;
 * busy = union of op intervals, idle = step - busy; host_issue = union of all host intervals
 * (the step's issue, launches included); launch_api = union of the launch calls.
 */
export function stepSplit(step: StepTrace): SplitNumbers {
  const spans: Span[] = [...step.host, ...step.ops];
  if (spans.length === 0)
    throw new RangeError(`stepSplit: the ${step.mode} step at context ${step.context} has no intervals`);
  const start_us = Math.min(...spans.map((s) => s.start_us));
  const end_us = Math.max(...spans.map((s) => s.end_us));
  const step_ms = (end_us - start_us) / US_PER_MS;
  const busy_ms = unionMs(step.ops);
  return {
    step_ms,
    host_issue_ms: unionMs(step.host),
    launch_api_ms: unionMs(step.host.filter((h) => h.kind === "launch")),
    busy_ms,
    idle_ms: step_ms - busy_ms,
  };
}

/**
 * The median traced step by step time (the lower middle of an even count): the one step that the split and the
 * breakdown's op time are both of, so that its ops, busy and idle agree (one slow call in another step moves neither).
 */
export function medianStep(steps: readonly StepTrace[]): StepTrace {
  if (steps.length === 0) throw new RangeError("medianStep: no steps");
  const byTime = steps.map((step) => ({ step, ms: stepSplit(step).step_ms })).sort((a, b) => a.ms - b.ms);
  return byTime[Math.floor((byTime.length - 1) / 2)]!.step;
}

/** The split of the median step, whole: its busy + idle add up to its step. */
export const medianSplit = (steps: readonly StepTrace[]): SplitNumbers => stepSplit(medianStep(steps));

/** Per (mode, context), in order of appearance: one aggregate row per kernel (or native function) name. */
export function kernelSummaries(
  steps: readonly StepTrace[],
): { mode: StudyMode; context: number; kernels: OpAggregate[] }[] {
  const keys = [
    ...new Map(steps.map((s) => [`${s.mode}@${s.context}`, { mode: s.mode, context: s.context }])).values(),
  ];
  return keys.map(({ mode, context }) => ({
    mode,
    context,
    kernels: aggregateOps(stepsOf(steps, mode, context), byKernelName),
  }));
}
