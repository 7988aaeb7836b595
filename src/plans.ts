// The architectures' decode steps: one row per family of the registry (model/architectures.ts), GPT-2's (plan-gpt2.ts)
// and the Llama family's (plan-llama.ts).
import { familyNameOf, type FamilyName, type ModelConfig } from "./model/architectures.ts";
import type { GPT2Config } from "./model/gpt2.ts";
import type { LlamaConfig } from "./model/llama.ts";
import type { StepArch } from "./native/kernel-names.ts";
import { llamaPlanShape, llamaStep, type LlamaBuffers } from "./plan-llama.ts";
import { decodeStep, planShape, type ModelBuffers } from "./plan-gpt2.ts";
import { DEFAULT_STEP_FORM, type PlanKind, type PlanOp, type StepForm } from "./plan.ts";

/** What the plan layer knows of a family: its step (in either plan) over a backend's buffers, its persistent kernel. */
interface StepFamily<C extends ModelConfig, B extends { config: C }> {
  /** the step for T new rows of each of the buffers' sequences */
  step(buffers: B, T: number, kind: PlanKind): PlanOp[];
  /** the step's shape without a backend: every pointer a placeholder */
  planShape(config: C, T: number, form: StepForm): PlanOp[];
  /** its persistent step kernel (cuda/persistent.cu) */
  stepArch: StepArch;
}

/** Any family's buffers on a backend (src/run/). */
export type StepBuffers = ModelBuffers | LlamaBuffers;
type AnyStepFamily = StepFamily<ModelConfig, StepBuffers>;

const STEP_FAMILIES: { [F in FamilyName]: AnyStepFamily } = {
  gpt2: {
    step: decodeStep,
    planShape,
    stepArch: "Gpt2Step",
  } satisfies StepFamily<GPT2Config, ModelBuffers> as AnyStepFamily,
  llama: {
    step: llamaStep,
    planShape: llamaPlanShape,
    stepArch: "LlamaStep",
  } satisfies StepFamily<LlamaConfig, LlamaBuffers> as AnyStepFamily,
};

const stepFamilyOf = (config: ModelConfig): AnyStepFamily => STEP_FAMILIES[familyNameOf(config)];

/** The architecture's persistent step kernel (cuda/persistent.cu). */
export const stepArchOf = (config: ModelConfig): StepArch => stepFamilyOf(config).stepArch;

/** The step for T new rows of each of the buffers' sequences, in its architecture's plan `kind`. */
export const stepOf = (buffers: StepBuffers, T: number, kind: PlanKind): PlanOp[] =>
  stepFamilyOf(buffers.config).step(buffers, T, kind);

/** The step's shape without a backend (plan-gpt2.ts planShape) for any architecture. */
export function planShapeOf(config: ModelConfig, T: number, form: StepForm = DEFAULT_STEP_FORM): PlanOp[] {
  return stepFamilyOf(config).planShape(config, T, form);
}

/**
 * The most rows of a sequence one pass over it takes (a prefill, the uncached baseline's recompute): a longer one
 * runs as passes of this many rows, so that the activations and the attention's split-key scratch are sized by
 * it, not by the context (one pass of 32k rows would need an H200's whole memory for the scratch alone).
 */
export const PASS_ROWS = 2048;

/** `rows` rows from position `from` as passes of at most `most` rows each: each pass's first position and rows. */
export function passesOf(rows: number, most: number = PASS_ROWS, from = 0): { pos: number; T: number }[] {
  if (!Number.isInteger(rows) || rows < 1 || !Number.isInteger(most) || most < 1)
    throw new RangeError(`passesOf: ${rows} rows in passes of at most ${most}`);
  return Array.from({ length: Math.ceil(rows / most) }, (_, i) => ({
    pos: from + i * most,
    T: Math.min(most, rows - i * most),
  }));
}
