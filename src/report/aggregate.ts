// From traced steps to tables and sentences: op aggregates (Nsight's cuda_gpu_kern_sum shape), where a
// step's time goes (busy / idle / host issue / launch API), and verdicts computed from those numbers.
import type { OpAggregate, OpInterval, SeedRow, StepTrace, StudyMode, TimeSplit } from "../profile/types.ts";
import { summarize } from "./stats.ts";

const US_PER_MS = 1000;

export type OpKey = (op: OpInterval) => string;
export const byFamily: OpKey = (op) => op.family;
/** Transformer block "h3", or the op's label outside the blocks (embed, ln_f, lm_head, argmax). */
export const byLayer: OpKey = (op) => (op.layer === null ? op.label : `h${op.layer}`);
export const byKernelName: OpKey = (op) => op.name;

const durationMs = (i: { start_us: number; end_us: number }) => (i.end_us - i.start_us) / US_PER_MS;

/** One row per key over every op interval of `steps`; per-call statistics; sorted by total time, descending. */
export function aggregateOps(steps: readonly StepTrace[], keyOf: OpKey): OpAggregate[] {
  const durationsByKey = new Map<string, number[]>();
  for (const op of steps.flatMap((s) => s.ops)) {
    const key = keyOf(op);
    const list = durationsByKey.get(key) ?? [];
    list.push(durationMs(op));
    durationsByKey.set(key, list);
  }
  const rows = [...durationsByKey].map(([key, durations]) => {
    const s = summarize(durations);
    const total_ms = durations.reduce((a, b) => a + b, 0);
    return { key, calls: durations.length, total_ms, mean_ms: s.mean, median_ms: s.median, min_ms: s.min, max_ms: s.max, stddev_ms: s.stddev, share: 0 };
  });
  const all_ms = rows.reduce((a, r) => a + r.total_ms, 0);
  for (const r of rows) r.share = all_ms > 0 ? r.total_ms / all_ms : 0;
  return rows.sort((a, b) => b.total_ms - a.total_ms || a.key.localeCompare(b.key));
}

/** Per-family and per-layer tables of one (mode, context)'s traced steps, and the median op time per step. */
export function buildBreakdown(steps: readonly StepTrace[]): { families: OpAggregate[]; layers: OpAggregate[]; op_sum_ms: number } {
  if (steps.length === 0) throw new RangeError("buildBreakdown: no steps");
  const families = aggregateOps(steps, byFamily);
  // the median step's op time: one slow call in one step must not move the per-step figure
  const op_sum_ms = summarize(steps.map((s) => s.ops.reduce((a, op) => a + durationMs(op), 0))).median;
  return { families, layers: aggregateOps(steps, byLayer), op_sum_ms };
}

/** Median over the steps of each family's time per step (ms). */
export function familyMsPerStep(steps: readonly StepTrace[]): Map<string, number> {
  const perStep = steps.map((s) => {
    const totals = new Map<string, number>();
    for (const op of s.ops) totals.set(op.family, (totals.get(op.family) ?? 0) + durationMs(op));
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
  if (spans.length === 0) throw new RangeError(`stepSplit: the ${step.mode} step at context ${step.context} has no intervals`);
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

/** The split of the median step (by step time), whole: its busy + idle add up to its step. */
export function medianSplit(steps: readonly StepTrace[]): SplitNumbers {
  if (steps.length === 0) throw new RangeError("medianSplit: no steps");
  const splits = steps.map(stepSplit).sort((a, b) => a.step_ms - b.step_ms);
  return splits[Math.floor((splits.length - 1) / 2)]!;
}

export interface ModeSplit {
  mode: StudyMode;
  context: number;
  /** from traced steps: where the time goes (idle share, busy, host issue) */
  split: SplitNumbers;
  /** median step time measured without tracing: what modes are compared by */
  untraced_ms: number;
  /** ops (kernel launches) per step */
  ops_per_step: number;
}

/** An idle share at or above this says the device mostly waits. */
export const IDLE_MAJORITY = 0.5;
/** A graph saving at or above this share of the eager step is a large effect. */
export const LARGE_SAVING = 0.3;
/** Differences below this share of the step are treated as noise. */
export const NOISE = 0.05;

/** Three significant digits for sentences: "0.132 ms", "5.20 ms", "41.0 ms", "312 ms". */
const ms = (x: number) => `${Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3)} ms`;
const pct = (x: number) => `${Math.round(x * 100)}%`;
const idleShare = (s: SplitNumbers) => (s.step_ms > 0 ? s.idle_ms / s.step_ms : 0);

function comparedWithEager(m: ModeSplit, eager: ModeSplit | undefined): string {
  if (!eager || m.mode === "eager" || m.mode === "uncached") return "";
  const saved = eager.untraced_ms - m.untraced_ms;
  const share = eager.untraced_ms > 0 ? Math.abs(saved) / eager.untraced_ms : 0;
  if (share < NOISE) return `; it takes the same time per token as eager (within ${pct(NOISE)})`;
  const what = m.mode === "graph" ? "graph replay" : "issuing the plan natively";
  return saved > 0
    ? `; ${what} removes ${ms(saved)} per token (${pct(share)} of eager)`
    : `; ${what} adds ${ms(-saved)} per token (${pct(share)} of eager)`;
}

function modeSentence(m: ModeSplit, eager: ModeSplit | undefined): string {
  const s = m.split;
  const launches = s.launch_api_ms > 0 ? `, ${ms(s.launch_api_ms)} of it inside launch calls` : "";
  return (
    `${m.mode} (context ${m.context}): the device is idle ${pct(idleShare(s))} of the ${ms(s.step_ms)} step ` +
    `(${m.ops_per_step} ops busy ${ms(s.busy_ms)}); the host spends ${ms(s.host_issue_ms)} issuing it${launches}` +
    `${comparedWithEager(m, eager)}.`
  );
}

function graphConclusion(eager: ModeSplit, graph: ModeSplit): string {
  const e = eager.split;
  const g = graph.split;
  const savedShare = eager.untraced_ms > 0 ? (eager.untraced_ms - graph.untraced_ms) / eager.untraced_ms : 0;
  const evidence =
    `the device idles ${pct(idleShare(e))} of the eager step (traced), and a CUDA graph of the same kernels takes ` +
    `${ms(graph.untraced_ms)} instead of ${ms(eager.untraced_ms)} untraced (${savedShare >= 0 ? "-" : "+"}${pct(Math.abs(savedShare))})`;
  const rest = `the graph step is ${pct(1 - idleShare(g))} busy with ${ms(g.busy_ms)} of kernel time`;
  if (idleShare(e) >= IDLE_MAJORITY && savedShare >= LARGE_SAVING) {
    return `Is the floor launch overhead? Mostly yes: ${evidence}; what remains is kernel time (${rest}).`;
  }
  if (idleShare(e) >= IDLE_MAJORITY) {
    return (
      `Is the floor launch overhead? Not launch overhead alone: ${evidence}, so removing per-kernel launches ` +
      `does not recover most of the idle time; ${rest}, and the graph step still idles ${pct(idleShare(g))}.`
    );
  }
  if (savedShare >= LARGE_SAVING) {
    return (
      `Is the floor launch overhead? The numbers disagree: ${evidence}, yet the device is busy most of the eager step; ` +
      `the graph's kernels themselves run faster (${ms(g.busy_ms)} against ${ms(e.busy_ms)} busy), so look at kernel time, not launches.`
    );
  }
  return `Is the floor launch overhead? No: ${evidence}; the floor is kernel time (${ms(e.busy_ms)} busy per eager step).`;
}

function eagerOnlyConclusion(eager: ModeSplit, native: ModeSplit | undefined): string {
  const e = eager.split;
  const looks = idleShare(e) >= IDLE_MAJORITY ? "suggests launch overhead" : "suggests op time, not launch overhead";
  const nativeEvidence = native
    ? `; issuing the same ops natively in one call takes ${ms(native.untraced_ms)} against ${ms(eager.untraced_ms)} from TypeScript`
    : "";
  return (
    `Is the floor launch overhead? Not tested with a graph (none on this backend): the device idles ${pct(idleShare(e))} of the ` +
    `${ms(e.step_ms)} eager step, which ${looks}${nativeEvidence}.`
  );
}

/**
 * One sentence per mode (idle share, host issue, and the change against eager), then a final sentence
 * answering "is the per-token floor launch overhead?" from the eager and graph splits — saying so when
 * the numbers do not support it, or cannot decide it.
 */
export function splitVerdicts(modes: readonly ModeSplit[]): { sentences: { mode: StudyMode; sentence: string }[]; conclusion: string } {
  const eager = modes.find((m) => m.mode === "eager");
  const graph = modes.find((m) => m.mode === "graph");
  const native = modes.find((m) => m.mode === "eager-native");
  const sentences = modes.map((m) => ({ mode: m.mode, sentence: modeSentence(m, eager) }));
  const conclusion = !eager
    ? "Is the floor launch overhead? Undecided: the eager mode was not traced, so the time between launches is unknown."
    : graph
      ? graphConclusion(eager, graph)
      : eagerOnlyConclusion(eager, native);
  return { sentences, conclusion };
}

/** The seed question at one context: FLOP reduction against time reduction. */
export function seedVerdict(row: SeedRow): string {
  const measured = [row.graph_ms, row.eager_ms, row.native_ms].filter((x): x is number => x !== null);
  const cached = measured.length ? Math.min(...measured) : null;
  if (row.uncached_ms === null || cached === null) {
    return `At context ${row.context} the KV cache does ${row.flop_reduction.toFixed(0)}× fewer FLOPs; the times to compare were not measured.`;
  }
  const speedup = row.uncached_ms / cached;
  const link = speedup < row.flop_reduction / 2 ? "but the step is only" : "and the step is";
  return (
    `At context ${row.context} the KV cache does ${row.flop_reduction.toFixed(0)}× fewer FLOPs ${link} ` +
    `${speedup.toFixed(1)}× faster (${ms(row.uncached_ms)} → ${ms(cached)}).`
  );
}

/** Per (mode, context), in order of appearance: one aggregate row per kernel (or native function) name. */
export function kernelSummaries(steps: readonly StepTrace[]): { mode: StudyMode; context: number; kernels: OpAggregate[] }[] {
  const keys = [...new Map(steps.map((s) => [`${s.mode}@${s.context}`, { mode: s.mode, context: s.context }])).values()];
  return keys.map(({ mode, context }) => ({ mode, context, kernels: aggregateOps(stepsOf(steps, mode, context), byKernelName) }));
}
