// Non-finite values in a run: finite weights can still overflow float32 (a weight of 3e38, an activation
// that grows layer by layer), and argmax over NaN logits picks token 0 without a word. The logits are
// checked after each step; when they are not finite, the step is re-run eagerly one op at a time, each
// op's output checked, to name the first op that produced a non-finite value.
import type { Backend } from "../backends/backend.ts";
import type { CompiledStep } from "./step.ts";

/** Index of the first NaN or ±Inf in `values`, or -1. */
export function firstNonFinite(values: Float32Array): number {
  for (let i = 0; i < values.length; i++) {
    const x = values[i]!;
    if (x - x !== 0) return i;
  }
  return -1;
}

export interface NonFiniteOrigin {
  /** the op's plan label (h3.mlp.c_fc) and layer (null outside the blocks) */
  label: string;
  layer: number | null;
  /** the op's index in the step */
  index: number;
  value: number;
}

/**
 * Runs `step` eagerly op by op from the state `reset` restores, reading each op's output back; the first
 * op whose output holds a NaN or ±Inf, or null if none does (the non-finite value did not come back).
 */
export function firstNonFiniteOp(backend: Backend, step: CompiledStep, reset: () => void): NonFiniteOrigin | null {
  reset();
  for (let i = 0; i < step.ops.length; i++) {
    step.eagerCalls[i]!();
    const out = step.ops[i]!.output;
    if (!out) continue;
    const values = new Float32Array(out.floats);
    backend.synchronize();
    backend.download({ ptr: out.ptr, bytes: values.byteLength }, values);
    const at = firstNonFinite(values);
    if (at >= 0) return { label: step.ops[i]!.label, layer: step.ops[i]!.layer, index: i, value: values[at]! };
  }
  return null;
}

/** One line for the user: which logits, what value where, and the op that produced the first non-finite value. */
export function nonFiniteMessage(
  what: string,
  logits: Float32Array,
  at: number,
  origin: NonFiniteOrigin | null,
  opsPerStep: number,
): string {
  const where = origin
    ? `the first op with a non-finite output is ${origin.label} (${origin.layer === null ? "outside the blocks" : `layer ${origin.layer}`}, op ${origin.index + 1} of ${opsPerStep} in the step)`
    : `re-run op by op, no op's output was non-finite`;
  return `the logits ${what} are not finite (${logits[at]} for token id ${at}): ${where}; the model's values overflow float32`;
}
