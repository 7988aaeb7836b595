// The kernel model's prediction beside the measurement: on a GPU the model has parameters for, every cached
// point of the study and every intervention's step gets the step time the model predicts for its launch mode,
// storage types and batch (at the working estimates and at both ends of their ranges), so that the first run
// on the GPU calibrates the model. Predictions, labelled so.
import type { KernelLaunches } from "../../backends/backend.ts";
import type { LaunchFloor } from "../../backends/instrument.ts";
import { withKvHeads, type ModelConfig } from "../../model/architectures.ts";
import type { PlanKind, StepForm } from "../../plan.ts";
import type { SassFacts } from "../../verify/sass-checks.ts";
import type { InterventionConfig, InterventionsSection, PredictionsSection, StudyPoint } from "../types.ts";
import { GPU_MODELS, type Estimate, type GpuModel, type GpuName } from "./gpus.ts";
import { decodeKernelInputs, persistentKernel } from "./inputs.ts";
import { MODEL_MODES, predictRange, type ModelMode, type PredictionRange } from "./model.ts";

const isModelled = (mode: string): mode is ModelMode => (MODEL_MODES as readonly string[]).includes(mode);

/** One measured cached step: its launch mode, context, storage types and batch, and its median time. */
export interface MeasuredStep extends InterventionConfig {
  mode: string;
  context: number;
  measured_ms: number;
}

/**
 * The study's cached points (its own storage types, one sequence) and every other intervention's step, as measured
 * steps: the intervention that repeats the study's own configuration in a mode the study measured is left out, so
 * each prediction stands beside one measurement.
 */
export function measuredSteps(
  points: readonly StudyPoint[],
  config: InterventionConfig,
  interventions?: InterventionsSection,
): MeasuredStep[] {
  const study = points
    .filter((p) => p.mode !== "uncached")
    .map((p) => ({ ...config, batch: 1, mode: p.mode, context: p.context, measured_ms: p.device_ms.median }));
  const key = (m: MeasuredStep) => `${m.mode} ${m.context} ${m.dtype} ${m.kv_dtype} ${m.batch} ${m.kv_heads}`;
  const measured = new Set(study.map(key));
  const configs = (interventions?.points ?? []).map((p) => ({
    dtype: p.dtype,
    kv_dtype: p.kv_dtype,
    batch: p.batch,
    kv_heads: p.kv_heads,
    mode: interventions!.mode,
    context: p.context,
    measured_ms: p.step_ms.median,
  }));
  return [...study, ...configs.filter((m) => !measured.has(key(m)))];
}

/** One traced point of the study (its own storage types, one sequence): its op families' median time per step, and how many of its ops overlapped their predecessors. */
export interface TracedFamilies {
  mode: string;
  context: number;
  familyMs: ReadonlyMap<string, number>;
  overlappingOps: number;
}

/**
 * Every measured step in a modelled mode, with the model's step time at its context, storage types and batch beside
 * it; and per op family, the model's kernels beside the traced ones where the kernels ran one after another (in
 * graph-pdl a kernel's record holds its wait for the predecessor: its duration is not the kernel's own time).
 */
export function buildPredictions(
  gpu: GpuName,
  config: ModelConfig,
  plan: PlanKind,
  measured: readonly MeasuredStep[],
  library: KernelLaunches,
  sass: { facts: SassFacts[] | null; note: string },
  launch: LaunchFloor,
  traced: readonly TracedFamilies[] = [],
  study?: InterventionConfig,
): PredictionsSection {
  const model: GpuModel = GPU_MODELS[gpu];
  const cache = new Map<string, PredictionRange>();
  const stepAt = (m: MeasuredStep) => {
    const key = `${m.context} ${m.dtype} ${m.kv_dtype} ${m.batch} ${m.kv_heads}`;
    if (!cache.has(key)) {
      const form: StepForm = { plan, batch: m.batch, weights: m.dtype, kv: m.kv_dtype };
      const variant = withKvHeads(config, m.kv_heads);
      cache.set(
        key,
        predictRange(
          decodeKernelInputs(variant, form, m.context, library, sass.facts),
          model,
          persistentKernel(variant, form, library.facts, sass.facts),
        ),
      );
    }
    return cache.get(key)!;
  };
  const rows = measured.flatMap((m) => {
    if (!isModelled(m.mode)) return [];
    const step = stepAt(m);
    const predicted = step.mid.modes[m.mode];
    if (predicted === null) return [];
    return [
      {
        mode: m.mode,
        context: m.context,
        dtype: m.dtype,
        kv_dtype: m.kv_dtype,
        batch: m.batch,
        kv_heads: m.kv_heads,
        measured_ms: m.measured_ms,
        predicted_ms: predicted / 1e3,
        optimistic_ms: step.fast.modes[m.mode]! / 1e3,
        pessimistic_ms: step.slow.modes[m.mode]! / 1e3,
        measured_over_predicted: m.measured_ms / (predicted / 1e3),
      },
    ];
  });
  const kernels = study
    ? traced
        .filter((t) => t.overlappingOps === 0 && isModelled(t.mode))
        .flatMap((t) => {
          const step = stepAt({ ...study, mode: t.mode, context: t.context, measured_ms: 0 });
          return [...t.familyMs].map(([family, ms]) => {
            const sum = (p: PredictionRange["mid"]) =>
              p.kernels.filter((k) => k.family === family).reduce((s, k) => s + k.kernelUs, 0);
            const predicted = sum(step.mid);
            return {
              mode: t.mode,
              context: t.context,
              family,
              calls: step.mid.kernels.filter((k) => k.family === family).length,
              measured_us: ms * 1e3,
              predicted_us: predicted,
              optimistic_us: sum(step.fast),
              pessimistic_us: sum(step.slow),
              measured_over_predicted: predicted > 0 ? (ms * 1e3) / predicted : null,
            };
          });
        })
    : [];
  const overlapped = [...new Set(traced.filter((t) => t.overlappingOps > 0).map((t) => t.mode))];
  return {
    gpu: model.name,
    how: `kernel model (src/profile/kernel-model/), launch shapes from the library's launchers, ${sass.note}`,
    points: rows,
    kernels,
    kernels_how:
      "per op family, the kernels' time per step alone (no gaps between them) beside the traced kernels' median per step, " +
      `where the kernels ran one after another${overlapped.length ? ` (not in ${overlapped.join(", ")}: its kernels overlap, and a record holds its wait for the predecessor)` : ""}`,
    launch_parameters: launchParameters(model, launch),
  };
}

/** The model's costs per launch or barrier (its least known parameters) beside this run's empty-kernel measurements. */
function launchParameters(model: GpuModel, launch: LaunchFloor): PredictionsSection["launch_parameters"] {
  const rows: [string, Estimate | null, number | null][] = [
    ["graph node gap", model.graphNodeUs, launch.graph_node_us],
    ["graph-pdl node gap", model.pdlNodeUs, launch.pdl_node_us],
    ["grid barrier (persistent), blocks arriving at once", model.gridBarrierUs, launch.grid_barrier_us],
    ["grid barrier (persistent), skewed arrivals", model.gridBarrierUs, launch.grid_barrier_skewed_us],
  ];
  return rows.flatMap(([parameter, e, measured]) =>
    e ? [{ parameter, model_us: e.value, low_us: e.low, high_us: e.high, measured_us: measured }] : [],
  );
}
