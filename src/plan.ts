// A decode step as a list of ops, what every architecture's step is made of (plan-gpt2.ts, plan-llama.ts: each
// reads like its model's math). The same list runs eagerly (one FFI call per op, from TypeScript), or is encoded
// once for the native op table (cuda/plan.h) to run in one call or to be captured as a CUDA graph. Each op
// carries its work.
import {
  cFunction,
  DTYPES,
  floatParams,
  opWork,
  OPS,
  PLAN_SLOTS,
  positionalArgs,
  type DtypeName,
  type OpArgs,
  type OpFamily,
  type OpOutput,
  type OpSpec,
  type OpSymbols,
  type Param,
  type Work,
} from "./ops.ts";

/** One op: its family, where it sits in the model, its op_* arguments in signature order, and its work. */
export interface PlanOp {
  family: OpFamily;
  label: string;
  layer: number | null;
  args: number[];
  /** FLOPs and bytes of this op when every sequence's first row is at position `pos` */
  work(pos: number): Work;
  /** the float activation it writes (null: cache rows or token ids) */
  output: OpOutput | null;
}

export interface EncodedPlan {
  ops: PlanOp[];
  /** (ops, PLAN_SLOTS) int64 records for plan_create */
  records: BigInt64Array;
}

/**
 * Which ops a step is made of. "unfused": one op per step of GPT-2's math, 11 per layer (136 launches for
 * GPT-2 small). "fused": a decode step of one row runs the fused decode ops instead — layer norm in the next
 * matvec, bias + GELU and the residual adds in the matvecs' epilogues, kv_append in c_attn's, argmax in the LM
 * head — 5 per layer (62 for GPT-2 small); steps of several rows (prefill, the uncached baseline) stay unfused.
 */
export type PlanKind = "fused" | "unfused";
export const PLAN_KINDS: readonly PlanKind[] = ["fused", "unfused"];

/**
 * What a step is: its plan, how many sequences it decodes together, and how its weights (matrices and embedding
 * tables) and its KV cache are stored.
 */
export interface StepForm {
  plan: PlanKind;
  batch: number;
  weights: DtypeName;
  kv: DtypeName;
}
/** The step when nothing else is asked for: the fused plan, one sequence, fp32 weights and cache. */
export const DEFAULT_STEP_FORM: StepForm = { plan: "fused", batch: 1, weights: "f32", kv: "f32" };
/** A step form's storage types as the op arguments' DTYPES codes (ModelBuffers.dtypes). */
export const dtypeCodes = (form: Pick<StepForm, "weights" | "kv">) => ({
  weights: DTYPES[form.weights],
  kv: DTYPES[form.kv],
});

/** One op of the plan, its work bound to its arguments. */
export function planOp<F extends OpFamily>(family: F, label: string, layer: number | null, args: OpArgs<F>): PlanOp {
  const spec = OPS[family] as unknown as OpSpec<readonly Param[]>;
  return {
    family,
    label,
    layer,
    args: positionalArgs(family, args),
    work: (pos) => opWork(spec, args, pos),
    output: spec.output(args),
  };
}

/**
 * A pointer of a plan that must never run: 16-byte aligned (the launchers pick their vector paths) and not null
 * (a null table is an op's "none").
 */
export const PLACEHOLDER_POINTER = 256;

/** Encodes ops as plan records: int64 slots, a float as its bit pattern in the low 32 bits. */
export function encodePlan(ops: PlanOp[]): EncodedPlan {
  const records = new BigInt64Array(ops.length * PLAN_SLOTS);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  ops.forEach((o, i) => {
    if (o.args.length >= PLAN_SLOTS) throw new Error(`${o.label}: ${o.args.length} arguments do not fit a plan record`);
    const floats = floatParams(o.family);
    records[i * PLAN_SLOTS] = BigInt(OPS[o.family].code);
    o.args.forEach((a, k) => {
      if (floats.includes(k)) {
        f32[0] = a;
        records[i * PLAN_SLOTS + 1 + k] = BigInt(u32[0]!);
      } else {
        if (!Number.isSafeInteger(a)) throw new Error(`${o.label}: argument ${k} (${a}) is not an integer`);
        records[i * PLAN_SLOTS + 1 + k] = BigInt(a);
      }
    });
  });
  return { ops, records };
}

type Call = (...args: number[]) => void;

/** A closure making exactly one call with fixed arguments: no spread, no allocation per call. */
function bindCall(fn: Call, a: readonly number[]): () => void {
  const [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20] =
    a as number[] as number[] & { length: 21 } as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
  switch (a.length) {
    case 3:
      return () => fn(a0, a1, a2);
    case 4:
      return () => fn(a0, a1, a2, a3);
    case 5:
      return () => fn(a0, a1, a2, a3, a4);
    case 6:
      return () => fn(a0, a1, a2, a3, a4, a5);
    case 7:
      return () => fn(a0, a1, a2, a3, a4, a5, a6);
    case 8:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7);
    case 9:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8);
    case 10:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9);
    case 11:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10);
    case 12:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
    case 13:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12);
    case 14:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13);
    case 15:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14);
    case 16:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15);
    case 17:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16);
    case 18:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17);
    case 19:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18);
    case 20:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19);
    case 21:
      return () => fn(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20);
    default:
      throw new Error(`no eager call for ${a.length} arguments (a plan record holds ${PLAN_SLOTS - 1})`);
  }
}

/**
 * Compiles ops into closures that each make exactly one FFI call with fixed numeric arguments —
 * the analogue of a Python framework dispatching each op (no spreads, no allocation per call).
 */
export function compileEager(ops: PlanOp[], symbols: OpSymbols): Array<() => void> {
  return ops.map((o) => bindCall(symbols[cFunction(o.family)] as Call, o.args));
}
