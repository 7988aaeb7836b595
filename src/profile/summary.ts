// From the study's measurements to the ProfileSummary every report is drawn from.
import { cpus, hostname, release, totalmem, type } from "node:os";

import type { Backend } from "../backends/backend.ts";
import { CpuBackend } from "../backends/cpu.ts";
import { CudaBackend } from "../backends/cuda.ts";
import { parameterCount, type GPT2Config } from "../model/config.ts";
import type { GPT2Weights } from "../model/weights.ts";
import { buildBreakdown, familyMsPerStep, medianSplit, seedVerdict, splitVerdicts, stepsOf, type ModeSplit } from "../report/aggregate.ts";
import { summarize } from "../report/stats.ts";
import type { Instrument, Peaks } from "./instruments.ts";
import type { Measured, StudyOptions, StudyResult } from "./study.ts";
import type { DeviceDescription, KernelRegime, LaunchFloor, OpFamily, ProfileSummary, SeedRow, StepTrace, StudyMode, StudyPoint, Work } from "./types.ts";
import { cachedStepWork, classifyRegime, flopReduction, sumWork, uncachedStepWork } from "./work-model.ts";

export const TOOL = { name: "decode-floor", version: "0.1.0" };

function stepWorkOf(cfg: GPT2Config, mode: StudyMode, context: number) {
  return mode === "uncached" ? uncachedStepWork(cfg, context) : cachedStepWork(cfg, context);
}

function describeDevice(backend: Backend, peaks: Peaks, launch: LaunchFloor): DeviceDescription {
  const detail: Record<string, string | number> = {};
  if (backend instanceof CudaBackend) {
    const d = backend.device;
    Object.assign(detail, {
      compute_capability: `${d.ccMajor}.${d.ccMinor}`, sms: d.smCount, sm_clock_mhz: d.smClockKhz / 1000,
      memory_bytes: d.totalMemBytes, memory_clock_mhz: d.memClockKhz / 1000, bus_width_bits: d.memBusWidthBits,
      l2_bytes: d.l2Bytes, driver_version: d.driverVersion, runtime_version: d.runtimeVersion,
    });
  }
  if (backend instanceof CpuBackend) detail.threads = backend.threads;
  if (backend.kind === "emu") detail.note = "the CUDA kernels' sources executed on the CPU: times are not GPU times";
  return { backend: backend.kind === "cpu" ? "cpu" : "cuda", name: backend.deviceName, detail, peaks, launch };
}

/**
 * The cost of dispatching one op in a mode, measured with empty ops: the floor below which an op is
 * launch-bound. Eager on a GPU pays the whole TypeScript → FFI → launch path, measured as the eager step's
 * issue time per op; eager-native pays the C++ launch call; a graph pays a node. The CPU pays the FFI call.
 */
function floorFor(mode: StudyMode, backend: Backend, launch: LaunchFloor, measured: Measured[], opsPerStep: number): number {
  if (backend.kind === "cpu") return launch.host_us;
  if (mode === "graph") return launch.graph_node_us ?? launch.host_us;
  if (mode === "eager-native") return launch.host_us;
  const eager = measured.filter((m) => m.mode === mode);
  return eager.length ? Math.max(launch.host_us, (Math.min(...eager.map((m) => m.issue_ms.median)) / opsPerStep) * 1e3) : launch.host_us;
}

function achieved(work: Work, ms: number, peaks: Peaks, floorUs: number, opsPerStep: number) {
  const s = ms / 1e3;
  const flops_per_s = work.flops / s;
  const bytes_per_s = work.bytes / s;
  return {
    flops_per_s, bytes_per_s,
    flops_share: flops_per_s / peaks.flops_per_s,
    bytes_share: bytes_per_s / peaks.bytes_per_s,
    regime: classifyRegime(ms * 1e3, work, peaks, floorUs * opsPerStep),
  };
}

/**
 * Each op family's regime at a traced point: its work per step over its median time per step (calls of
 * different shapes — c_attn, c_proj, c_fc — are summed, not averaged); launch-bound judged per call.
 */
function regimesOf(cfg: GPT2Config, point: StudyPoint, steps: readonly StepTrace[], peaks: Peaks, floorUs: number): KernelRegime[] {
  if (!point.breakdown || steps.length === 0) return [];
  const ops = stepWorkOf(cfg, point.mode, point.context);
  return [...familyMsPerStep(steps)].map(([key, ms]) => {
    const family = key as OpFamily;
    const mine = ops.filter((o) => o.family === family);
    const work = sumWork(mine);
    const perCallUs = (ms * 1e3) / mine.length;
    const perCallWork = { ...work, flops: work.flops / mine.length, bytes: work.bytes / mine.length };
    return {
      family, mode: point.mode, context: point.context, median_us: perCallUs,
      flops_per_s: work.flops / (ms / 1e3), bytes_per_s: work.bytes / (ms / 1e3),
      regime: classifyRegime(perCallUs, perCallWork, peaks, floorUs),
    };
  });
}

/** A traced point's split for the verdicts, with its untraced median step time to compare modes by. */
export function modeSplitOf(p: StudyPoint, traces: readonly StepTrace[]): ModeSplit {
  return { mode: p.mode, context: p.context, split: p.split!, untraced_ms: p.device_ms.median, ops_per_step: stepsOf(traces, p.mode, p.context)[0]!.ops.length };
}

/** The seed's table: per context, no cache vs the cached modes, and the FLOP reduction. */
export function seedTable(cfg: GPT2Config, points: StudyPoint[], contexts: number[]): SeedRow[] {
  const at = (mode: StudyMode, c: number) => points.find((p) => p.mode === mode && p.context === c)?.device_ms.median ?? null;
  return contexts.map((context) => {
    const uncached = at("uncached", context), eager = at("eager", context), graph = at("graph", context);
    const ratio = (a: number | null, b: number | null) => (a !== null && b !== null ? a / b : null);
    return {
      context, uncached_ms: uncached, eager_ms: eager, graph_ms: graph, native_ms: at("eager-native", context),
      speedup_eager: ratio(uncached, eager), speedup_graph: ratio(uncached, graph),
      flop_reduction: flopReduction(cfg, context),
    };
  });
}

/** What the step's launches cost at the measured empty-op floor, against the cached step's time. */
function launchVerdict(points: StudyPoint[], launch: LaunchFloor, opsOf: (mode: StudyMode, context: number) => number): string[] {
  const cached = points.filter((p) => p.mode !== "uncached");
  if (!cached.length) return [];
  const context = Math.max(...cached.map((p) => p.context));
  const ops = opsOf("eager", context);
  const step = Math.min(...cached.filter((p) => p.context === context).map((p) => p.device_ms.median));
  const hostMs = (ops * launch.host_us) / 1e3;
  const graph = launch.graph_node_us === null ? "" : `; as graph nodes, ${ops} × ${launch.graph_node_us.toFixed(2)} us = ${((ops * launch.graph_node_us) / 1e3).toFixed(3)} ms`;
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
    ? `; at that peak it would take ${atPeakMs.toFixed(2)} ms, ${(atPeakMs / Math.min(...cached)).toFixed(1)}× the fastest cached step`
    : "";
  return [
    `The uncached baseline at context ${p.context} achieves ${(p.achieved.flops_per_s / 1e9).toFixed(1)} GFLOP/s, ` +
      `${(100 * p.achieved.flops_share).toFixed(0)}% of the measured fp32 peak (${(peaks.flops_per_s / 1e9).toFixed(1)} GFLOP/s)${bound}.`,
  ];
}

/** Verdict sentences at the largest context every traced mode reached, then the seed question per context. */
function verdicts(points: StudyPoint[], traces: StepTrace[], seed: SeedRow[]): string[] {
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

export function buildSummary(args: {
  command: string;
  backend: Backend;
  instrument: Instrument;
  weights: GPT2Weights;
  opts: StudyOptions;
  peaks: Peaks;
  launch: LaunchFloor;
  result: StudyResult;
}): ProfileSummary {
  const { backend, weights, opts, peaks, launch, result } = args;
  const cfg = weights.config;
  const opsOf = (mode: StudyMode, context: number) => stepWorkOf(cfg, mode, context).length;
  const floorUs = (mode: StudyMode, context: number) => floorFor(mode, backend, launch, result.measured, opsOf(mode, context));
  const points: StudyPoint[] = result.measured.map((m) => {
    const steps = stepsOf(result.traces, m.mode, m.context);
    const work = sumWork(stepWorkOf(cfg, m.mode, m.context));
    const point: StudyPoint = {
      mode: m.mode, context: m.context, device_ms: m.device_ms, host_ms: m.host_ms, work,
      achieved: achieved(work, m.device_ms.median, peaks, floorUs(m.mode, m.context), opsOf(m.mode, m.context)),
    };
    if (steps.length) {
      point.breakdown = buildBreakdown(steps);
      point.split = { ...medianSplit(steps), verdict: "" };
    }
    return point;
  });
  for (const context of opts.contexts) {
    const here = points.filter((p) => p.context === context && p.split);
    const v = splitVerdicts(here.map((p) => modeSplitOf(p, result.traces)));
    for (const s of v.sentences) here.find((p) => p.mode === s.mode)!.split!.verdict = s.sentence;
  }
  const seed = seedTable(cfg, points, opts.contexts);
  const overheads = result.measured.flatMap((m) => (m.tracing_overhead === null ? [] : [m.tracing_overhead]));
  return {
    schema_version: 1,
    tool: TOOL,
    command: args.command,
    date: new Date().toISOString(),
    machine: {
      hostname: hostname(), os: `${type()} ${release()}`, cpu: cpus()[0]?.model ?? "unknown", cpus: cpus().length,
      memory_bytes: totalmem(), bun: Bun.version,
    },
    device: describeDevice(backend, peaks, launch),
    model: { config: cfg, source: weights.source, parameters: parameterCount(cfg), weight_bytes: parameterCount(cfg) * 4 },
    settings: { modes: opts.modes, contexts: opts.contexts, repeats: opts.repeats, warmup: opts.warmup, kernels: opts.kernels },
    points,
    regimes: points.flatMap((p) => regimesOf(cfg, p, stepsOf(result.traces, p.mode, p.context), peaks, floorUs(p.mode, p.context))),
    seed_table: seed,
    end_to_end: result.endToEnd,
    memory: result.memory,
    tracing: {
      available: args.instrument.canTrace,
      overhead_pct: overheads.length ? summarize(overheads).median * 100 : null,
      dropped_records: result.dropped,
      note: `${args.instrument.tracingNote}${result.mismatched ? `; ${result.mismatched} traced steps did not line up one-to-one with the plan` : ""}`,
    },
    verdicts: [...verdicts(points, result.traces, seed), ...uncachedBaselineVerdict(points, peaks), ...launchVerdict(points, launch, opsOf)],
  };
}
