// Verdicts computed from the study's numbers: one sentence per mode on where its step's time goes, the answer
// to "is the per-token floor launch overhead?", the seed's question per context, and the launch floor.
import { gridBarrierUs, type LaunchFloor, type Peaks } from "../backends/instrument.ts";
import { launchMode, type LaunchModeName } from "../run/launch-modes.ts";
import { stepsOf, type SplitNumbers } from "./aggregate.ts";
import type { KernelRegime, SeedRow, StepTrace, StudyMode, StudyPoint } from "./types.ts";

export interface ModeSplit {
  mode: StudyMode;
  context: number;
  /** from traced steps: where the time goes (idle share, busy, host issue) */
  split: SplitNumbers;
  /** median step time measured without tracing: what modes are compared by */
  untraced_ms: number;
  /** those steps' p10 and p90: a difference inside both modes' intervals is not claimed as one */
  untraced_p10_ms: number;
  untraced_p90_ms: number;
  /** where each step was paired with a read pass of the memory (the CPU): its steps' median over their own floors */
  paired_over_floor: number | null;
  /** ops (kernel launches) per step */
  ops_per_step: number;
}

/** An idle share at or above this says the device mostly waits. */
export const IDLE_MAJORITY = 0.5;
/** A graph saving at or above this share of the eager step is a large effect. */
export const LARGE_SAVING = 0.3;
/** Differences below this share of the step are treated as noise. */
export const NOISE = 0.05;

/** A time in a sentence, three significant digits, whole ms from 100 on: "0.132 ms", "5.20 ms", "41.0 ms", "312 ms". */
export const ms = (x: number) => `${Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3)} ms`;
/** A share as a whole percentage: "5%". */
export const pct = (x: number) => `${Math.round(x * 100)}%`;
const idleShare = (s: SplitNumbers) => (s.step_ms > 0 ? s.idle_ms / s.step_ms : 0);

/**
 * A mode's untraced step where eager's is compared with it: where both were paired with read passes, at eager's read
 * rate (the same bytes, so their ratio is their ratio to their floors; `rate` says so in a clause), as a shared
 * host's memory can change speed between the modes' steps and raw medians would credit a mode with the memory's.
 */
function atEagersRate(m: ModeSplit, eager: ModeSplit): { ms: number; rate: string } {
  const paired = m.paired_over_floor !== null && eager.paired_over_floor !== null;
  const atRate = atReferenceRate(eager.untraced_ms, eager.paired_over_floor, m.untraced_ms, m.paired_over_floor);
  return {
    ms: atRate,
    // the table's figure after the one at that rate, so the two can be told apart
    rate: paired ? `, at eager's memory read rate; its step ${ms(m.untraced_ms)} as timed` : "",
  };
}

/**
 * A step of `ms` taken at a reference step's read rate where both were paired with read passes of the memory (each
 * its steps' median over their own floors, `overFloor`; the same bytes, so the ratio of those is the ratio of the
 * times at one rate), else as measured.
 */
export function atReferenceRate(refMs: number, refOverFloor: number | null, ms: number, overFloor: number | null) {
  return refOverFloor === null || overFloor === null ? ms : refMs * (overFloor / refOverFloor);
}

/** A study point's steps over their floors where they were paired with read passes, else null. */
export const pairedOverFloor = (p: StudyPoint) => (p.read_bytes_per_s === null ? null : p.over_floor);

/**
 * A mode's step against eager's at the same context (atEagersRate): the same within NOISE; else the difference,
 * said to lie within the steps' spread where the two modes' p10–p90 intervals (the mode's at eager's rate) overlap.
 */
function comparedWithEager(m: ModeSplit, eager: ModeSplit | undefined): string {
  if (!eager || m.mode === "eager" || m.mode === "uncached") return "";
  const { ms: modeMs, rate } = atEagersRate(m, eager);
  const saved = eager.untraced_ms - modeMs;
  const share = eager.untraced_ms > 0 ? Math.abs(saved) / eager.untraced_ms : 0;
  if (share < NOISE) return `; it takes the same time per token as eager (within ${pct(NOISE)}${rate})`;
  const what = launchMode(m.mode as LaunchModeName).phrase;
  const change =
    saved > 0
      ? `${what} removes ${ms(saved)} per token (${pct(share)} of eager${rate})`
      : `${what} adds ${ms(-saved)} per token (${pct(share)} of eager${rate})`;
  const scale = m.untraced_ms > 0 ? modeMs / m.untraced_ms : 1;
  const [low, high] = [m.untraced_p10_ms * scale, m.untraced_p90_ms * scale];
  if (low > eager.untraced_p90_ms || high < eager.untraced_p10_ms) return `; ${change}`;
  return (
    `; at the median ${change}, within the steps' spread (p10–p90 ${range(low, high)} against eager's ` +
    `${range(eager.untraced_p10_ms, eager.untraced_p90_ms)})`
  );
}

/** An interval of times in a sentence: "4.10–5.30 ms". */
const range = (low: number, high: number) => `${ms(low).replace(" ms", "")}–${ms(high)}`;

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
  const nativeAt = native && atEagersRate(native, eager);
  const nativeEvidence = nativeAt
    ? `; issuing the same ops natively in one call takes ${ms(nativeAt.ms)} against ${ms(eager.untraced_ms)} from TypeScript${nativeAt.rate}`
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
export function splitVerdicts(modes: readonly ModeSplit[]): {
  sentences: { mode: StudyMode; sentence: string }[];
  conclusion: string;
} {
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

/** The fastest cached step of a seed-table row, if any mode was measured. */
export function bestCachedMs(row: SeedRow): number | null {
  const measured = Object.values(row.cached).map((c) => c.ms);
  return measured.length ? Math.min(...measured) : null;
}

/** A FLOP reduction in a sentence: one decimal below 10 (6.6×, which whole numbers would round past a 7.5× beside it), whole above. */
export const flopReductionText = (x: number) => `${x.toFixed(x < 10 ? 1 : 0)}×`;

/** The seed question at one context: FLOP reduction against time reduction. */
export function seedVerdict(row: SeedRow): string {
  const cached = bestCachedMs(row);
  if (row.uncached_ms === null || cached === null) {
    return `At context ${row.context} the KV cache does ${flopReductionText(row.flop_reduction)} fewer FLOPs; the times to compare were not measured.`;
  }
  const speedup = row.uncached_ms / cached;
  const link = speedup < row.flop_reduction / 2 ? "but the step is only" : "and the step is";
  return (
    `At context ${row.context} the KV cache does ${flopReductionText(row.flop_reduction)} fewer FLOPs ${link} ` +
    `${speedup.toFixed(1)}× faster (${ms(row.uncached_ms)} → ${ms(cached)}).`
  );
}

/** A K/V share of the step's bytes at or above this: the cache, not the weights, is the floor. */
export const CACHE_BOUND = 0.5;
/** At or above this share (and below CACHE_BOUND) the cache is a visible part of the floor beside the weights. */
const CACHE_VISIBLE = 0.1;

/** A step that grew more than this × its bytes between two contexts: its bytes do not explain its growth. */
const BEYOND_BYTES = 1.15;

/**
 * Which bytes the cached step is bound by at the largest context: the cache's share of the step's bytes (work
 * model) and how much the fastest cached step grew over the shortest context's — and where it grew more than its
 * bytes did, that the cache's reads cost more than their bytes. Nothing with one context.
 */
export function cacheRegimeVerdict(seed: readonly SeedRow[]): string[] {
  const timed = seed.filter((r) => bestCachedMs(r) !== null);
  const first = timed[0];
  const last = timed[timed.length - 1];
  if (!first || !last || first === last) return [];
  const growth = bestCachedMs(last)! / bestCachedMs(first)!;
  const bytes = bytesGrowth(first, last);
  const beyondBytes = bytes !== null && (growthAtOneRate(first, last) ?? growth) > BEYOND_BYTES * bytes;
  const share = last.kv_byte_share;
  const regime =
    share >= CACHE_BOUND
      ? "the floor is the cache, not the weights"
      : share >= CACHE_VISIBLE
        ? "the weights are still most of the floor, the cache a visible part of it"
        : beyondBytes
          ? "the weights are most of the bytes, but the cache's reads cost more than their share"
          : "the floor is the weights; the cache barely shows";
  const beyond = beyondBytes ? `, more than its bytes, which grew ${bytes!.toFixed(2)}×` : "";
  return [
    `At context ${last.context} the cache is ${pct(share)} of the step's bytes (work model) and the step is ` +
      `${growth.toFixed(1)}× its time at context ${first.context}${readDriftClause(first, last)}${beyond}: ${regime}.`,
  ];
}

/**
 * The decode attention's achieved read rate against the ops that read the weights (`weightFamilies`), in the same
 * traced steps of each cached mode at the longest context traced: whether reading the cache runs at the
 * bandwidth the matvecs reach. Nothing where the attention was not traced there.
 */
export function attentionBandwidthVerdict(
  regimes: readonly KernelRegime[],
  weightFamilies: ReadonlySet<string>,
): string[] {
  const attention = regimes.filter((r) => r.family === "attention" && r.mode !== "uncached");
  if (attention.length === 0) return [];
  const context = Math.max(...attention.map((r) => r.context));
  const gbs = (x: number) => `${(x / 1e9).toFixed(1)} GB/s`;
  const range = (f: (x: number) => string, a: number, b: number) => (f(a) === f(b) ? f(a) : `${f(a)}–${f(b)}`);
  const clauses = attention
    .filter((a) => a.context === context)
    .flatMap((a) => {
      const matvecs = regimes
        .filter((r) => r.mode === a.mode && r.context === context && weightFamilies.has(r.family))
        .map((r) => r.bytes_per_s);
      if (matvecs.length === 0) return [];
      const [lo, hi] = [Math.min(...matvecs), Math.max(...matvecs)];
      return [{ a, lo, hi }];
    })
    .map(
      ({ a, lo, hi }, i) =>
        `${gbs(a.bytes_per_s)} against ${range((x) => (x / 1e9).toFixed(1), lo, hi)} GB/s` +
        `${i === 0 ? " for the ops that read the weights" : ""} in ${a.mode} ` +
        `(${range((x) => x.toFixed(2), a.bytes_per_s / hi, a.bytes_per_s / lo)}×)`,
    );
  if (clauses.length === 0) return [];
  return [
    `At context ${context}, in the same traced steps, the decode attention read ${clauses.join(", and ")} ` +
      "(each op's bytes by the work model over its traced time).",
  ];
}

/**
 * The step's bytes (work model) at `last` over those at `first`: each floor × the rate it was taken at (a read pass
 * beside the steps, else the peaks' rate for both); null where only one was paired with read passes.
 */
function bytesGrowth(first: SeedRow, last: SeedRow): number | null {
  if ((first.read_bytes_per_s === null) !== (last.read_bytes_per_s === null)) return null;
  return (last.floor_ms * (last.read_bytes_per_s ?? 1)) / (first.floor_ms * (first.read_bytes_per_s ?? 1));
}

/** The step's growth at one read rate where both contexts' steps were paired with read passes, else null. */
function growthAtOneRate(first: SeedRow, last: SeedRow): number | null {
  const bytes = bytesGrowth(first, last);
  if (bytes === null || first.read_bytes_per_s === null || first.over_floor === null || last.over_floor === null)
    return null;
  return (last.over_floor / first.over_floor) * bytes;
}

/** Read rates beside two contexts' timings further apart than this share: the step's growth is partly the memory's. */
const READ_DRIFT = 0.05;

/**
 * Where the memory's read rate beside the fastest mode's steps moved between two contexts, the step's growth at one
 * rate (each context's bytes at it × its steps over their own floors) and each against its floor; else nothing.
 */
function readDriftClause(first: SeedRow, last: SeedRow): string {
  if (
    first.read_bytes_per_s === null ||
    last.read_bytes_per_s === null ||
    first.over_floor === null ||
    last.over_floor === null
  )
    return "";
  const slower = first.read_bytes_per_s / last.read_bytes_per_s;
  if (Math.abs(slower - 1) <= READ_DRIFT) return "";
  const moved = slower > 1 ? `${slower.toFixed(2)}× slower` : `${(1 / slower).toFixed(2)}× faster`;
  // bytes = floor × rate, so at one rate the times stand as over_floor × floor × rate
  const atOneRate = growthAtOneRate(first, last)!;
  return (
    ` — but the memory read ${moved} beside its steps than beside context ${first.context}'s: at one read rate the step is ` +
    `${atOneRate.toFixed(1)}× its time there, ${first.over_floor.toFixed(2)}× and ${last.over_floor.toFixed(2)}× the floor read beside each`
  );
}

/** A traced point's split for the verdicts, with its untraced median step time to compare modes by. */
export function modeSplitOf(p: StudyPoint, traces: readonly StepTrace[]): ModeSplit {
  return {
    mode: p.mode,
    context: p.context,
    split: p.split!,
    untraced_ms: p.device_ms.median,
    untraced_p10_ms: p.device_ms.p10,
    untraced_p90_ms: p.device_ms.p90,
    paired_over_floor: pairedOverFloor(p),
    ops_per_step: stepsOf(traces, p.mode, p.context)[0]!.ops.length,
  };
}

/** What the step's launches cost at the measured empty-op floor, against the cached step's time. */
export function launchVerdict(
  points: StudyPoint[],
  launch: LaunchFloor,
  opsOf: (mode: StudyMode, context: number) => number,
): string[] {
  const cached = points.filter((p) => p.mode !== "uncached");
  if (!cached.length) return [];
  const context = Math.max(...cached.map((p) => p.context));
  const ops = opsOf("eager", context);
  const step = Math.min(...cached.filter((p) => p.context === context).map((p) => p.device_ms.median));
  const hostMs = (ops * launch.host_us) / 1e3;
  const as = (what: string, n: number, us: number | null) =>
    us === null ? "" : `; ${what}, ${n} × ${us.toFixed(2)} us = ${((n * us) / 1e3).toFixed(3)} ms`;
  // the persistent step (fused plan only: where it ran) crosses a grid barrier between ops, one fewer than its ops
  const barriers = cached.some((p) => p.mode === "persistent")
    ? as("as the persistent step's grid barriers", ops - 1, gridBarrierUs(launch))
    : "";
  const graph =
    as("as graph nodes", ops, launch.graph_node_us) + as("as graph-pdl nodes", ops, launch.pdl_node_us) + barriers;
  return [
    `Launch floor at context ${context}: ${ops} ops × ${launch.host_us.toFixed(2)} us per empty launch = ${hostMs.toFixed(3)} ms of host time per step${graph}, ` +
      `against a fastest cached step of ${step.toFixed(3)} ms (${((100 * hostMs) / step).toFixed(0)}%).`,
  ];
}

/**
 * How far the uncached baseline is from the compute peak, at the largest context it was measured: the cache's
 * speed-up is only as meaningful as the baseline it is set against.
 */
export function uncachedBaselineVerdict(points: StudyPoint[], peaks: Peaks): string[] {
  const uncached = points.filter((p) => p.mode === "uncached");
  if (!uncached.length) return [];
  const p = uncached.reduce((a, b) => (b.context > a.context ? b : a));
  const cached = points.filter((q) => q.mode !== "uncached" && q.context === p.context).map((q) => q.device_ms.median);
  const atPeakMs = (p.work.flops / peaks.flops_per_s) * 1e3;
  const bound = cached.length
    ? `; at that peak it would take ${ms(atPeakMs)}, ${(atPeakMs / Math.min(...cached)).toFixed(1)}× the fastest cached step`
    : "";
  return [
    `The uncached baseline at context ${p.context} achieves ${(p.achieved.flops_per_s / 1e9).toFixed(1)} GFLOP/s, ` +
      `${pct(p.achieved.flops_share)} of the measured fp32 peak (${(peaks.flops_per_s / 1e9).toFixed(1)} GFLOP/s)${bound}.`,
  ];
}

/** Verdict sentences at the largest context every traced mode reached, then the seed question at the first and last context. */
export function studyVerdicts(points: StudyPoint[], traces: StepTrace[], seed: SeedRow[]): string[] {
  const traced = points.filter((p) => p.split);
  const largest = Math.max(...traced.map((p) => p.context));
  const modes: ModeSplit[] = traced
    .filter((p) => p.context === largest && p.mode !== "uncached")
    .map((p) => modeSplitOf(p, traces));
  const out: string[] = [];
  if (modes.length) {
    const v = splitVerdicts(modes);
    out.push(...v.sentences.map((s) => s.sentence), v.conclusion);
  }
  const withUncached = seed.filter((r) => r.uncached_ms !== null);
  const pick = withUncached.length ? [withUncached[0]!, withUncached[withUncached.length - 1]!] : [];
  out.push(...[...new Set(pick)].map(seedVerdict));
  return out;
}
