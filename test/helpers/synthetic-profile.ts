// Synthetic, deterministic profile data for the report tests: traced steps of a tiny GPT-2 on a
// pretend GPU (eager: the device waits for each launch; graph: kernels back to back) and the
// ProfileSummary assembled from them with the real aggregation and work model.
import { kvCacheBytesPerToken, parameterCount, type GPT2Config } from "../../src/model/gpt2.ts";
import type { HostInterval, OpInterval } from "../../src/backends/instrument.ts";
import type { OpFamily } from "../../src/ops.ts";
import { DEFAULT_STEP_FORM, type StepForm } from "../../src/plan.ts";
import { buildBreakdown, medianSplit, stepSplit, stepsOf } from "../../src/profile/aggregate.ts";
import { pointFloor } from "../../src/profile/memory-floor.ts";
import { seedTable } from "../../src/profile/summary.ts";
import {
  SCHEMA_VERSION,
  type ProfileSummary,
  type StepTrace,
  type StudyMode,
  type StudyPoint,
} from "../../src/profile/types.ts";
import { modeSplitOf, seedVerdict, splitVerdicts } from "../../src/profile/verdicts.ts";
import {
  cachedStepWork,
  classifyRegime,
  stepWork,
  sumWork,
  uncachedStepWork,
  type OpWork,
} from "../../src/profile/work-model.ts";
import { summarize } from "../../src/stats.ts";

/** The synthetic profile's step: the unfused plan (one kernel per op), one sequence, fp32. */
const UNFUSED: StepForm = { ...DEFAULT_STEP_FORM, plan: "unfused" };

export const tinyConfig: GPT2Config = {
  name: "tiny",
  n_layer: 2,
  n_head: 2,
  n_embd: 64,
  n_positions: 64,
  vocab_size: 101,
  layer_norm_epsilon: 1e-5,
};

export interface StepShape {
  mode: StudyMode;
  context: number;
  start_us: number;
  /** duration of one launch API call */
  launch_us: number;
  /** host time between launch calls (TypeScript + FFI) */
  gap_us: number;
  kernel_us: number;
  /** first correlation id */
  correlation: number;
  layers?: number;
}

function kernelName(family: OpInterval["family"]): string {
  return `${family}_kernel`;
}

/** Eager (or uncached): one launch per op; each kernel starts when its launch returns or the previous kernel ends. */
function eagerStep(cfg: GPT2Config, shape: StepShape, T: number, pos: number): StepTrace {
  const plan = stepWork(cfg, T, pos, UNFUSED);
  const host: HostInterval[] = [];
  const ops: OpInterval[] = [];
  let hostAt = shape.start_us + shape.gap_us;
  let deviceFree = 0;
  plan.forEach((w, index) => {
    const correlation = shape.correlation + index;
    host.push({
      kind: "launch",
      name: "cudaLaunchKernel",
      start_us: hostAt,
      end_us: hostAt + shape.launch_us,
      correlation,
    });
    const start_us = Math.max(hostAt + shape.launch_us, deviceFree);
    ops.push({
      ...syntheticOp(w, index, start_us, shape.kernel_us, correlation),
      grid: [index + 1, 1, 1],
      block: [256, 1, 1],
      registers: 32,
      shared_bytes: 1024,
    });
    deviceFree = start_us + shape.kernel_us;
    hostAt += shape.launch_us + shape.gap_us;
  });
  host.unshift({ kind: "step", name: "decode step", start_us: shape.start_us, end_us: hostAt });
  return { mode: shape.mode, context: shape.context, host, ops };
}

/** One op of the plan `w` as a kernel interval of `kernel_us` from `start_us`. */
function syntheticOp(w: OpWork, index: number, start_us: number, kernel_us: number, correlation: number): OpInterval {
  return {
    index,
    family: w.family,
    layer: w.layer,
    label: w.label,
    name: kernelName(w.family),
    start_us,
    end_us: start_us + kernel_us,
    correlation,
  };
}

/** Graph: one launch call; the kernels then run back to back, all under the launch's correlation id. */
function graphStep(cfg: GPT2Config, shape: StepShape): StepTrace {
  const plan = stepWork(cfg, 1, shape.context, UNFUSED);
  const launchStart = shape.start_us + shape.gap_us;
  const launchEnd = launchStart + shape.launch_us;
  const host: HostInterval[] = [
    { kind: "step", name: "decode step", start_us: shape.start_us, end_us: launchEnd + shape.gap_us },
    {
      kind: "launch",
      name: "cudaGraphLaunch",
      start_us: launchStart,
      end_us: launchEnd,
      correlation: shape.correlation,
    },
  ];
  const ops = plan.map((w, index): OpInterval => {
    const start_us = launchEnd + index * shape.kernel_us;
    return syntheticOp(w, index, start_us, shape.kernel_us, shape.correlation);
  });
  return { mode: shape.mode, context: shape.context, host, ops };
}

export function syntheticStep(cfg: GPT2Config, shape: StepShape): StepTrace {
  if (shape.mode === "graph") return graphStep(cfg, shape);
  if (shape.mode === "uncached") return eagerStep(cfg, shape, shape.context + 1, 0);
  return eagerStep(cfg, shape, 1, shape.context);
}

export const syntheticModes: StudyMode[] = ["uncached", "eager", "graph"];
export const syntheticContexts = [4, 32];
export const stepsPerPoint = 2;

function shapeFor(mode: StudyMode, context: number): Omit<StepShape, "start_us" | "correlation" | "mode" | "context"> {
  if (mode === "graph") return { launch_us: 6, gap_us: 3, kernel_us: 2 };
  if (mode === "uncached") return { launch_us: 4, gap_us: 1, kernel_us: 2 + context / 4 };
  return { launch_us: 4, gap_us: 1, kernel_us: 2 };
}

/** Two traced steps for every (mode, context), laid one after another from time 0. */
export function syntheticSteps(cfg: GPT2Config = tinyConfig): StepTrace[] {
  const steps: StepTrace[] = [];
  let start_us = 0;
  let correlation = 1;
  for (const mode of syntheticModes) {
    for (const context of syntheticContexts) {
      for (let i = 0; i < stepsPerPoint; i++) {
        const step = syntheticStep(cfg, { mode, context, start_us, correlation, ...shapeFor(mode, context) });
        steps.push(step);
        start_us = Math.max(...step.ops.map((o) => o.end_us), ...step.host.map((h) => h.end_us)) + 10;
        correlation += step.ops.length;
      }
    }
  }
  return steps;
}

const peaks = { flops_per_s: 1e12, bytes_per_s: 1e11, how_measured: "synthetic" };
const launchFloorUs = 4;

function studyPoint(cfg: GPT2Config, steps: StepTrace[], mode: StudyMode, context: number): StudyPoint {
  const mine = stepsOf(steps, mode, context);
  const split = medianSplit(mine);
  const device_ms = summarize(mine.map((s) => stepSplit(s).step_ms));
  const work = sumWork(mode === "uncached" ? uncachedStepWork(cfg, context) : cachedStepWork(cfg, context, UNFUSED));
  const seconds = device_ms.median / 1000;
  const flops_per_s = work.flops / seconds;
  const bytes_per_s = work.bytes / seconds;
  return {
    mode,
    context,
    device_ms,
    host_ms: summarize(mine.map((s) => stepSplit(s).host_issue_ms)),
    breakdown: buildBreakdown(mine),
    split: { ...split, verdict: "" },
    work,
    achieved: {
      flops_per_s,
      bytes_per_s,
      flops_share: flops_per_s / peaks.flops_per_s,
      bytes_share: bytes_per_s / peaks.bytes_per_s,
      regime: classifyRegime(device_ms.median * 1000, work, peaks, launchFloorUs),
    },
    ...pointFloor(
      mine.map((s) => ({ ms: stepSplit(s).step_ms, read: null })),
      work.bytes,
      peaks.bytes_per_s,
    ),
  };
}

/** A complete ProfileSummary drawn from `steps` (defaults to syntheticSteps()). */
export function syntheticSummary(steps: StepTrace[] = syntheticSteps(), cfg: GPT2Config = tinyConfig): ProfileSummary {
  const points = syntheticModes.flatMap((mode) =>
    syntheticContexts.map((context) => studyPoint(cfg, steps, mode, context)),
  );
  const lastContext = syntheticContexts[syntheticContexts.length - 1]!;
  const atLast = points.filter((p) => p.context === lastContext && p.mode !== "uncached");
  const { sentences, conclusion } = splitVerdicts(atLast.map((p) => modeSplitOf(p, steps)));
  for (const p of atLast) p.split!.verdict = sentences.find((s) => s.mode === p.mode)!.sentence;
  const fills = syntheticContexts.map((context) => ({
    context,
    fill: "prefill" as const,
    uncached_timed: true,
    uncached_model_ms: null,
  }));
  const seed_table = seedTable(cfg, DEFAULT_STEP_FORM, points, fills, peaks);
  const weight_bytes = 4 * parameterCount(cfg);
  const kvPerToken = kvCacheBytesPerToken(cfg);
  return {
    schema_version: SCHEMA_VERSION,
    tool: { name: "decode-floor", version: "0.1.0" },
    command: "bun run profile --modes uncached,eager,graph --contexts 4,32",
    date: "2025-01-02T03:04:05.000Z",
    machine: {
      hostname: "test-host",
      os: "linux x64",
      cpu: "Synthetic CPU @ 3 GHz",
      cpus: 16,
      memory_bytes: 64e9,
      bun: "1.4.5",
    },
    device: {
      backend: "cuda",
      name: "Synthetic GPU <sm_90> & co",
      detail: { sms: 132, memory_bytes: 141e9 },
      peaks,
      launch: {
        host_us: 2.5,
        device_us: 1.2,
        graph_node_us: 0.8,
        pdl_node_us: 0.5,
        grid_barrier_us: 0.7,
        grid_barrier_skewed_us: 0.9,
        grid_barrier_sc_us: 1.6,
        grid_barrier_sc_skewed_us: 2.1,
        how_measured: "synthetic",
      },
    },
    model: { config: cfg, source: "synthetic", parameters: parameterCount(cfg), dtype: "f32", weight_bytes },
    settings: {
      modes: syntheticModes,
      plan: "unfused",
      contexts: syntheticContexts,
      repeats: stepsPerPoint,
      warmup: 1,
      kernels: true,
      dtype: "f32",
      kv_dtype: "f32",
      fill: "auto",
      prefill_flops_per_s: 2.5e12,
    },
    points,
    regimes: atLast.flatMap((p) =>
      p.breakdown!.families.map((f) => ({
        family: f.key as OpFamily,
        mode: p.mode,
        context: p.context,
        median_us: f.median_ms * 1000,
        flops_per_s: 1e9,
        bytes_per_s: 1e9,
        regime: "launch-bound" as const,
      })),
    ),
    seed_table,
    end_to_end: [
      {
        mode: "eager",
        prompt_tokens: 4,
        new_tokens: 16,
        total_ms: 2.5,
        per_token_ms: 0.15625,
        ttft_ms: 0.4,
        tpot_ms: 0.14,
      },
      {
        mode: "graph",
        prompt_tokens: 4,
        new_tokens: 16,
        total_ms: 1.2,
        per_token_ms: 0.075,
        ttft_ms: 0.3,
        tpot_ms: 0.06,
      },
    ],
    memory: {
      fit: {
        free_bytes: 80e9,
        free_source: "cudaMemGetInfo free bytes",
        need: { weights: weight_bytes, cache: kvPerToken * cfg.n_positions, activations: 4_000_000 },
        largest_context: cfg.n_positions - 1,
        largest_context_by_batch: [1, 2, 4, 8].map((batch) => ({ batch, context: cfg.n_positions - 1 })),
      },
      resident_source: "bytes allocated (device memory is committed when it is allocated)",
      by_context: syntheticContexts.map((context) => ({
        context,
        kv_positions: context + 1,
        kv_bytes_formula: (context + 1) * kvPerToken,
        kv_bytes_resident: kvPerToken * cfg.n_positions,
        regions: [
          { name: "weights", allocated_bytes: weight_bytes, resident_bytes: weight_bytes },
          {
            name: "cache",
            allocated_bytes: kvPerToken * cfg.n_positions,
            resident_bytes: kvPerToken * cfg.n_positions,
          },
          { name: "scratch", allocated_bytes: 65536, resident_bytes: 65536 },
        ],
      })),
      weight_bytes,
      kv_bytes_per_token_formula: kvPerToken,
      kv_bytes_per_token_measured: kvPerToken,
      kv_cache_tokens: cfg.n_positions,
      kv_cache_bytes_formula: kvPerToken * cfg.n_positions,
      kv_cache_bytes_measured: kvPerToken * cfg.n_positions,
      workspace_bytes: 123456,
      how_measured: "cudaMemGetInfo before and after allocation",
      crossover: [{ batch: 1, context: Math.ceil(weight_bytes / kvPerToken) }],
    },
    tracing: { available: true, overhead_pct: 3.5, dropped_records: 0, note: "CUPTI activity records" },
    verdicts: [
      ...syntheticContexts.map((c) => seedVerdict(seed_table.find((r) => r.context === c)!)),
      ...sentences.map((s) => s.sentence),
      conclusion,
    ],
  };
}
