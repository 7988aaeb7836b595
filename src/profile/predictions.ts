// The kernel model's prediction beside the measurement: on a GPU the model has parameters for, every cached
// point of the study gets the step time the model predicts for its launch mode (at the working estimates and at
// both ends of their ranges), so that the first run on the GPU calibrates the model. Predictions, labelled so.
import type { LaunchShape } from "../backends/backend.ts";
import type { GPT2Config } from "../model/config.ts";
import { disassemble, findCuobjdump } from "../native/sass.ts";
import type { PlanKind, PlanOp } from "../plan.ts";
import { predictDecodeStep } from "../verify/prediction.ts";
import { sassFacts, type SassFacts } from "../verify/sass-checks.ts";
import { GPU_MODELS, gpuAt, MODEL_MODES, type GpuModel, type GpuName, type ModelMode } from "./kernel-model.ts";
import type { PredictionsSection, StudyPoint } from "./types.ts";

/** The model's GPU for a device name ("NVIDIA H200" → h200), or null where the model has none. */
export function gpuModelFor(deviceName: string): GpuName | null {
  if (/H200/i.test(deviceName)) return "h200";
  if (/\bA40\b/i.test(deviceName)) return "a40";
  return null;
}

/** SASS facts of the built CUDA library, or null (and why) where no disassembler is found. */
export function librarySass(libraryPath: string): { facts: SassFacts[] | null; note: string } {
  const cuobjdump = findCuobjdump();
  if (!cuobjdump) return { facts: null, note: "no cuobjdump found: the kernels' design loads and 64 registers assumed" };
  return { facts: disassemble(libraryPath, cuobjdump).map(sassFacts), note: "loads in flight and registers from the SASS of the library that ran" };
}

const isModelled = (mode: string): mode is ModelMode => (MODEL_MODES as readonly string[]).includes(mode);

/** Every measured cached point in a modelled mode, with the model's step time beside it. */
export function buildPredictions(
  gpu: GpuName, config: GPT2Config, plan: PlanKind, points: readonly StudyPoint[], shapesOf: (ops: PlanOp[]) => LaunchShape[],
  sass: { facts: SassFacts[] | null; note: string },
): PredictionsSection {
  const model: GpuModel = GPU_MODELS[gpu];
  const contexts = [...new Set(points.map((p) => p.context))];
  const steps = new Map(contexts.map((context) => {
    const at = (m: GpuModel) => predictDecodeStep(config, plan, context, m, shapesOf, sass.facts);
    return [context, { mid: at(model), fast: at(gpuAt(model, "optimistic")), slow: at(gpuAt(model, "pessimistic")) }];
  }));
  const rows = points.flatMap((p) => {
    if (!isModelled(p.mode)) return [];
    const step = steps.get(p.context)!;
    const predicted = step.mid.modes[p.mode];
    if (predicted === null) return [];
    return [{
      mode: p.mode, context: p.context, measured_ms: p.device_ms.median,
      predicted_ms: predicted / 1e3, optimistic_ms: step.fast.modes[p.mode]! / 1e3, pessimistic_ms: step.slow.modes[p.mode]! / 1e3,
      measured_over_predicted: p.device_ms.median / (predicted / 1e3),
    }];
  });
  return { gpu: model.name, how: `kernel model (src/profile/kernel-model.ts), launch shapes from the library's launchers, ${sass.note}`, points: rows };
}
