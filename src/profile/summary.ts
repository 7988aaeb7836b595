// From the study's measurements to the ProfileSummary every report is drawn from.
import { promptCacheVerdict } from "./prompt-cache.ts";
import { cpus, hostname, release, totalmem, type } from "node:os";

import type { Backend } from "../backends/backend.ts";
import { peaksBeside, type Instrument, type LaunchFloor, type Peaks } from "../backends/instrument.ts";
import { kvHeadsOf, parameterCountOf, type ModelConfig } from "../model/architectures.ts";
import type { ModelWeights } from "../model/architectures.ts";
import type { OpFamily, Work } from "../ops.ts";
import type { PlanKind, StepForm } from "../plan.ts";
import { storedWeightBytes } from "../run/model-buffers.ts";
import { launchMode, type LaunchModeName } from "../run/launch-modes.ts";
import { summarize } from "../stats.ts";
import { buildBreakdown, familyMsPerStep, medianSplit, stepsOf } from "./aggregate.ts";
import { buildInterventions } from "./interventions-summary.ts";
import { buildPeersSection } from "./peers-summary.ts";
import { buildPredictions, gpuModelFor, librarySass, measuredSteps, type MeasuredStep } from "./kernel-model/index.ts";
import { tracedByOp, type Measured, type StudyOptions, type StudyResult } from "./study.ts";
import {
  SCHEMA_VERSION,
  type InterventionConfig,
  type KernelRegime,
  type PeersSection,
  type PredictionsSection,
  type ProfileSummary,
  type SeedRow,
  type StepTrace,
  type StudyMode,
  type StudyPoint,
} from "./types.ts";
import type { PointFill } from "./fill.ts";
import {
  attentionBandwidthVerdict,
  cacheRegimeVerdict,
  launchVerdict,
  modeSplitOf,
  splitVerdicts,
  studyVerdicts,
  uncachedBaselineVerdict,
} from "./verdicts.ts";
import { pointFloor } from "./memory-floor.ts";
import { cachedStepWork, classifyRegime, flopReduction, sumWork, uncachedStepWork } from "./work-model.ts";

export const TOOL = { name: "decode-floor", version: "0.1.0" };

function stepWorkOf(cfg: ModelConfig, form: StepForm, mode: StudyMode, context: number) {
  return mode === "uncached" ? uncachedStepWork(cfg, context, form) : cachedStepWork(cfg, context, form);
}

/**
 * The cost of dispatching one op in a mode, from the launch floor measured with empty ops (LaunchMode.floorUs):
 * the floor below which an op is launch-bound. Where issuing is asynchronous, eager also pays the whole
 * TypeScript → FFI → launch path, measured as the eager step's issue time per op. The uncached baseline
 * runs eagerly.
 */
function floorFor(
  mode: StudyMode,
  backend: Backend,
  launch: LaunchFloor,
  measured: Measured[],
  opsPerStep: number,
): number {
  const eager = measured.filter((m) => m.mode === mode);
  const issueUsPerOp =
    backend.issueIsAsync && eager.length ? (Math.min(...eager.map((m) => m.issue_ms.median)) / opsPerStep) * 1e3 : null;
  return launchMode(mode === "uncached" ? "eager" : mode).floorUs(launch, issueUsPerOp);
}

function achieved(work: Work, ms: number, peaks: Peaks, floorUs: number, opsPerStep: number) {
  const s = ms / 1e3;
  const flops_per_s = work.flops / s;
  const bytes_per_s = work.bytes / s;
  return {
    flops_per_s,
    bytes_per_s,
    flops_share: flops_per_s / peaks.flops_per_s,
    bytes_share: bytes_per_s / peaks.bytes_per_s,
    regime: classifyRegime(ms * 1e3, work, peaks, floorUs * opsPerStep),
  };
}

/**
 * Each op family's regime at a traced point: its work per step over its median time per step (calls of
 * different shapes — c_attn, c_proj, c_fc — are summed, not averaged); launch-bound judged per call.
 */
function regimesOf(
  cfg: ModelConfig,
  form: StepForm,
  point: StudyPoint,
  steps: readonly StepTrace[],
  peaks: Peaks,
  floorUs: number,
): KernelRegime[] {
  if (!point.breakdown || steps.length === 0) return [];
  const ops = stepWorkOf(cfg, form, point.mode, point.context);
  return [...familyMsPerStep(steps)].map(([key, ms]) => {
    const family = key as OpFamily;
    const mine = ops.filter((o) => o.family === family);
    const work = sumWork(mine);
    const perCallUs = (ms * 1e3) / mine.length;
    const perCallWork = { ...work, flops: work.flops / mine.length, bytes: work.bytes / mine.length };
    return {
      family,
      mode: point.mode,
      context: point.context,
      median_us: perCallUs,
      flops_per_s: work.flops / (ms / 1e3),
      bytes_per_s: work.bytes / (ms / 1e3),
      regime: classifyRegime(perCallUs, perCallWork, peaks, floorUs),
    };
  });
}

/**
 * The op families of the cached step whose bytes are mostly weights: its matvecs, fused with whatever else; not a
 * norm's vector or the rotary table (at most half their op's bytes), nor the embedding, whose rows are weights but
 * no matvec's stream.
 */
export const weightReadingFamilies = (cfg: ModelConfig, form: StepForm) =>
  new Set(
    cachedStepWork(cfg, 1, form)
      .filter((o) => o.family !== "embed" && o.weight_bytes > o.bytes / 2)
      .map((o) => o.family),
  );

/** The cached launch mode's point with the least median step at `context`, if any was timed there. */
const fastestCachedAt = (points: readonly StudyPoint[], context: number) =>
  points
    .filter((p) => p.context === context && p.mode !== "uncached")
    .sort((a, b) => a.device_ms.median - b.device_ms.median)[0];

/**
 * The seed's table: per context, how its cache was filled, no cache (timed, or the work model's time where it
 * was not) against every cached launch mode measured, and the FLOP reduction.
 */
export function seedTable(
  cfg: ModelConfig,
  form: StepForm,
  points: StudyPoint[],
  fills: PointFill[],
  peaks: Peaks,
): SeedRow[] {
  const at = (mode: StudyMode, c: number) =>
    points.find((p) => p.mode === mode && p.context === c)?.device_ms.median ?? null;
  const cachedModes = [...new Set(points.map((p) => p.mode))].filter((m): m is LaunchModeName => m !== "uncached");
  return fills.map(({ context, fill, uncached_model_ms }) => {
    const uncached = at("uncached", context);
    const work = sumWork(cachedStepWork(cfg, context, form));
    const fastest = fastestCachedAt(points, context);
    const cached: SeedRow["cached"] = {};
    for (const mode of cachedModes) {
      const ms = at(mode, context);
      if (ms !== null) cached[mode] = { ms, speedup: uncached === null ? null : uncached / ms };
    }
    return {
      context,
      fill,
      uncached_ms: uncached,
      uncached_model_ms,
      cached,
      flop_reduction: flopReduction(cfg, context),
      kv_byte_share: work.kv_bytes / work.bytes,
      read_bytes_per_s: fastest?.read_bytes_per_s ?? null,
      floor_ms: (work.bytes / peaksBeside(peaks, fastest?.read_bytes_per_s).bytes_per_s) * 1e3,
      over_floor: fastest?.over_floor ?? null,
    };
  });
}

/**
 * On a GPU the kernel model has parameters for, its prediction beside every measured cached step and every traced
 * kernel family, for the model as placed (`placed`: its positions size the attention's grid, as in the steps timed).
 */
function predictionsOf(
  backend: Backend,
  placed: ModelConfig,
  plan: PlanKind,
  measured: MeasuredStep[],
  launch: LaunchFloor,
  points: StudyPoint[],
  traces: readonly StepTrace[],
  study: InterventionConfig,
): PredictionsSection | undefined {
  const gpu = gpuModelFor(backend.deviceName);
  const kernels = backend.kernels;
  if (!gpu || !kernels) return undefined;
  const traced = points.flatMap((p) =>
    p.breakdown && p.mode !== "uncached"
      ? [
          {
            mode: p.mode,
            context: p.context,
            familyMs: familyMsPerStep(stepsOf(traces, p.mode, p.context)),
            overlappingOps: p.breakdown.overlapping_ops,
          },
        ]
      : [],
  );
  return buildPredictions(
    gpu,
    placed,
    plan,
    measured,
    kernels,
    librarySass(kernels.libraryPath),
    launch,
    traced,
    study,
  );
}

function interventionsMethod(opts: StudyOptions, together: boolean): string {
  const { mode, variants } = opts.interventions!;
  const reshaped =
    variants.length > 1
      ? ` The K/V-head variants (${variants.map((v) => v.kv_heads).join(", ")}) are the model's attention reshaped: its own count with the study's weights, each other count with seeded weights of its shape, ` +
        (together
          ? "all placed at once and timed in the same rounds."
          : "timed one variant after another: together they do not fit in memory.")
      : "";
  return (
    `Every configuration (storage types × batch${variants.length > 1 ? " × K/V heads" : ""}) decodes one step of each of its sequences in ${mode.name} mode, at every ` +
    `context, the configurations in turn (A B C A B C …), ${opts.repeats} rounds after ${opts.warmup} warm-up step${opts.warmup === 1 ? "" : "s"} each; each sequence's cache ` +
    `holds \`context\` tokens of its own prompt, filled as the study's cache at that context was (a real prefill, or synthetic rows where the seed table says so). Bytes and FLOPs are the work model's for that configuration.${reshaped}`
  );
}

/**
 * The peers against the project's fastest cached mode at each context and the memory floor (bytes at the read rate
 * beside that mode's steps, else at the peaks').
 */
function peersOf(
  cfg: ModelConfig,
  opts: StudyOptions,
  points: StudyPoint[],
  seed: SeedRow[],
  peaks: Peaks,
  result: StudyResult,
): PeersSection | undefined {
  const p = result.peers;
  if (!p) return undefined;
  const bestAt = (context: number) => {
    const cached = fastestCachedAt(points, context);
    return cached ? { mode: cached.mode, ms: cached.device_ms.median } : null;
  };
  const floorAt = (context: number) => {
    const read = seed.find((r) => r.context === context)?.read_bytes_per_s;
    return (sumWork(cachedStepWork(cfg, context)).bytes / peaksBeside(peaks, read).bytes_per_s) * 1e3;
  };
  const unfilled = result.fills.filter((f) => f.fill === "synthetic").map((f) => f.context);
  const synthetic = unfilled.length
    ? ` The peers fill their caches by real prefill, so they were not run at the synthetically filled contexts (${unfilled.join(", ")}).`
    : "";
  const method =
    `At each context the project's modes and every peer subject take one decode step in turn (A B C A B C …), ${opts.repeats} rounds after ` +
    `${opts.warmup} warm-up step${opts.warmup === 1 ? "" : "s"} each, so drift on a shared machine hits all alike; each timed step follows an untimed one of the same subject, so that no subject is timed while the previous one's threads still spin. Each peer is its own process on the same weights and ` +
    `fills its cache with the same prompt tokens; it times its own step (PyTorch: CUDA events on a GPU, perf_counter on the CPU; ` +
    `llama.cpp: performance.now around one awaited evaluation). Greedy tokens are checked against the project's for ${p.reference.length} tokens.` +
    synthetic;
  return buildPeersSection(p, { prompt: p.prompt, reference: p.reference, bestAt, floorAt, method });
}

export function buildSummary(args: {
  command: string;
  backend: Backend;
  instrument: Instrument;
  weights: ModelWeights;
  opts: StudyOptions;
  peaks: Peaks;
  launch: LaunchFloor;
  result: StudyResult;
}): ProfileSummary {
  const { backend, weights, opts, peaks, launch, result } = args;
  const cfg = weights.config;
  const { form } = opts;
  const { weights: dtype, kv: kv_dtype } = form;
  const opsOf = (mode: StudyMode, context: number) => stepWorkOf(cfg, form, mode, context).length;
  const floorUs = (mode: StudyMode, context: number) =>
    floorFor(mode, backend, launch, result.measured, opsOf(mode, context));
  const points: StudyPoint[] = result.measured.map((m) => {
    const steps = stepsOf(result.traces, m.mode, m.context);
    const work = sumWork(stepWorkOf(cfg, form, m.mode, m.context));
    const floor = pointFloor(m.paired, work.bytes, peaks.bytes_per_s);
    const point: StudyPoint = {
      mode: m.mode,
      context: m.context,
      device_ms: m.device_ms,
      host_ms: m.host_ms,
      work,
      achieved: achieved(
        work,
        m.device_ms.median,
        peaksBeside(peaks, floor.read_bytes_per_s),
        floorUs(m.mode, m.context),
        opsOf(m.mode, m.context),
      ),
      ...floor,
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
  const seed = seedTable(cfg, form, points, result.fills, peaks);
  const interventions =
    result.interventions && opts.interventions
      ? buildInterventions(
          cfg,
          result.interventions,
          opts.interventions.mode.name,
          peaks,
          points,
          interventionsMethod(opts, result.interventions.together),
          { dtype, kv: kv_dtype, kv_heads: kvHeadsOf(cfg) },
        )
      : undefined;
  const study = { dtype, kv_dtype, batch: 1, kv_heads: kvHeadsOf(cfg) };
  const regimes = points.flatMap((p) =>
    regimesOf(cfg, form, p, stepsOf(result.traces, p.mode, p.context), peaks, floorUs(p.mode, p.context)),
  );
  const predictions = predictionsOf(
    backend,
    result.placed,
    form.plan,
    measuredSteps(points, study, interventions),
    launch,
    points,
    result.traces,
    study,
  );
  const overheads = result.measured.flatMap((m) => (m.tracing_overhead === null ? [] : [m.tracing_overhead]));
  return {
    schema_version: SCHEMA_VERSION,
    tool: TOOL,
    command: args.command,
    date: new Date().toISOString(),
    machine: {
      hostname: hostname(),
      os: `${type()} ${release()}`,
      cpu: cpus()[0]?.model ?? "unknown",
      cpus: cpus().length,
      memory_bytes: totalmem(),
      bun: Bun.version,
    },
    device: { ...backend.describe(), peaks, launch },
    model: {
      config: cfg,
      source: weights.source,
      parameters: parameterCountOf(cfg),
      dtype,
      weight_bytes: storedWeightBytes(cfg, dtype),
    },
    settings: {
      modes: opts.modes,
      plan: form.plan,
      contexts: opts.contexts,
      repeats: opts.repeats,
      warmup: opts.warmup,
      kernels: opts.kernels,
      dtype,
      kv_dtype,
      fill: opts.fill,
      prefill_flops_per_s: result.prefillFlopsPerS,
    },
    points,
    regimes,
    seed_table: seed,
    end_to_end: result.endToEnd,
    memory: result.memory,
    tracing: {
      available: args.instrument.canTrace,
      overhead_pct: overheads.length ? summarize(overheads).median * 100 : null,
      dropped_records: result.dropped,
      note: [
        args.instrument.tracingNote,
        ...(result.mismatched ? [`${result.mismatched} traced steps did not line up one-to-one with the plan`] : []),
        ...opts.modes
          .filter((m) => !tracedByOp(m))
          .map((m) => `${m} not traced op by op (its ops run inside one kernel)`),
      ].join("; "),
    },
    verdicts: [
      ...studyVerdicts(points, result.traces, seed),
      ...uncachedBaselineVerdict(points, peaks),
      ...cacheRegimeVerdict(seed),
      ...attentionBandwidthVerdict(regimes, weightReadingFamilies(cfg, form)),
      ...launchVerdict(points, launch, opsOf),
      ...(interventions ? [interventions.attribution.verdict] : []),
      ...(interventions?.kv_heads ? [interventions.kv_heads.verdict] : []),
      ...(result.promptCache ? [promptCacheVerdict(result.promptCache)] : []),
    ],
    ...(result.peers ? { peers: peersOf(cfg, opts, points, seed, peaks, result) } : {}),
    ...(interventions ? { interventions } : {}),
    ...(predictions ? { predictions } : {}),
    ...(result.promptCache ? { prompt_cache: result.promptCache } : {}),
  };
}
