// The architectures' decode steps, chosen by config: GPT-2's (plan.ts) and the Llama family's (plan-llama.ts).
import type { ModelConfig } from "./model/architectures.ts";
import { isLlamaConfig } from "./model/llama.ts";
import { llamaPlanShape } from "./plan-llama.ts";
import { DEFAULT_STEP_FORM, planShape, type PlanKind, type PlanOp, type StepForm } from "./plan.ts";

/** The plans an architecture has: GPT-2 both, the Llama family one op per step of its math. */
export function plansOf(config: ModelConfig): readonly PlanKind[] {
  return isLlamaConfig(config) ? ["unfused"] : ["fused", "unfused"];
}

/** The plan a run of this model takes when none is asked for. */
export const defaultPlan = (config: ModelConfig): PlanKind => plansOf(config)[0]!;

/** The step's shape without a backend (plan.ts planShape) for any architecture. */
export function planShapeOf(config: ModelConfig, T: number, form: StepForm = DEFAULT_STEP_FORM): PlanOp[] {
  return isLlamaConfig(config) ? llamaPlanShape(config, T, form) : planShape(config, T, form);
}
