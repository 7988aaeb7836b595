// The kernel model: a latency-and-bandwidth model of the decode step's kernels on a GPU and of the step in each
// launch mode (model.ts), the GPUs it knows (gpus.ts), its inputs read from the code — the plan's work, the
// launchers' shapes, the library's kernel facts, the SASS — (inputs.ts), and its predictions beside a profile's
// measurements (predictions.ts). Every number it gives is a prediction; its tables are src/report/prediction-tables.ts.
export {
  GPU_MODELS,
  gpuAt,
  gpuModelFor,
  registerBudget,
  SASS_GPU,
  type Estimate,
  type GpuModel,
  type GpuName,
} from "./gpus.ts";
export {
  activeLoads,
  decodeKernelInputs,
  factsFor,
  kernelInputs,
  rowGroups,
  kernelOf,
  librarySass,
  persistentKernel,
  predictDecodeStep,
} from "./inputs.ts";
export {
  blocksBeside,
  MODEL_MODES,
  predictKernel,
  predictRange,
  predictStep,
  residentBlocks,
  type KernelInput,
  type KernelPrediction,
  type ModelMode,
  type PersistentKernel,
  type PredictionRange,
  type StepPrediction,
} from "./model.ts";
export { buildPredictions, measuredSteps, type MeasuredStep, type TracedFamilies } from "./predictions.ts";
