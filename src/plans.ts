// The architectures' decode steps, chosen by config: GPT-2's (plan.ts) and the Llama family's (plan-llama.ts).
import type { ModelConfig } from "./model/architectures.ts";
import { isLlamaConfig } from "./model/llama.ts";
import type { StepArch } from "./native/kernel-names.ts";
import { llamaPlanShape, llamaPlans } from "./plan-llama.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, planShape, type PlanKind, type PlanOp, type StepForm } from "./plan.ts";

/** The plans an architecture has, the default first: GPT-2 both, the Llama family both but Qwen3 (llamaPlans). */
export function plansOf(config: ModelConfig): readonly PlanKind[] {
  return isLlamaConfig(config) ? llamaPlans(config) : PLAN_KINDS;
}

/** Why a model cannot run `plan` (one line for the user), or null where it can. */
export function planRefusal(config: ModelConfig, plan: PlanKind): string | null {
  if (plansOf(config).includes(plan)) return null;
  return `a ${config.name} model has no ${plan} plan (its per-head q/k norms need a whole head before the rotation): it runs --plan ${defaultPlan(config)}`;
}

/** The plan a run of this model takes when none is asked for. */
export const defaultPlan = (config: ModelConfig): PlanKind => plansOf(config)[0]!;

/** The architecture's persistent step kernel (cuda/persistent.cu). */
export const stepArchOf = (config: ModelConfig): StepArch => (isLlamaConfig(config) ? "LlamaStep" : "Gpt2Step");

/** The step's shape without a backend (plan.ts planShape) for any architecture. */
export function planShapeOf(config: ModelConfig, T: number, form: StepForm = DEFAULT_STEP_FORM): PlanOp[] {
  return isLlamaConfig(config) ? llamaPlanShape(config, T, form) : planShape(config, T, form);
}
