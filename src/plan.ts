// The decode step as a list of ops, built from the config — it reads like GPT-2's math.
// The same list runs eagerly (one FFI call per op, from TypeScript), or is encoded once for the native
// op table (cuda/plan.h) to run in one call or to be captured as a CUDA graph.
import type { Backend, OpSymbols } from "./backends/backend.ts";
import type { GPT2Config } from "./model/config.ts";
import type { OpFamily } from "./profile/types.ts";

/** cuda/plan.h OpCode */
export const OP_CODES: Record<OpFamily, number> = {
  embed: 1, layernorm: 2, linear: 3, kv_append: 4, attention: 5, gelu: 6, residual: 7, lm_head: 8, argmax: 9,
};
export const FAMILY_OF_CODE: OpFamily[] = Object.entries(OP_CODES).reduce<OpFamily[]>((acc, [family, code]) => {
  acc[code] = family as OpFamily;
  return acc;
}, []);
/** cuda/plan.h PLAN_SLOTS */
export const PLAN_SLOTS = 16;

/** One op: its family, where it sits in the model, and its op_* arguments in signature order. */
export interface PlanOp {
  family: OpFamily;
  label: string;
  layer: number | null;
  args: number[];
  /** indices into args holding floats (LayerNorm's eps) */
  floatArgs?: number[];
}

export interface EncodedPlan {
  ops: PlanOp[];
  /** (ops, PLAN_SLOTS) int64 records for plan_create */
  records: BigInt64Array;
}

/** Device buffers of one layer's weights. */
export interface LayerBuffers {
  ln_1: { weight: number; bias: number };
  c_attn: { weight: number; bias: number };
  attn_c_proj: { weight: number; bias: number };
  ln_2: { weight: number; bias: number };
  c_fc: { weight: number; bias: number };
  mlp_c_proj: { weight: number; bias: number };
}

/** Everything a step touches, as device pointers. Activations hold up to `maxRows` rows. */
export interface ModelBuffers {
  config: GPT2Config;
  wte: number; // (V, C)
  wpe: number; // (max_ctx, C)
  layers: LayerBuffers[];
  ln_f: { weight: number; bias: number };
  kCache: number[]; // per layer (max_ctx, C)
  vCache: number[];
  seq: number; // int32 (max_ctx + 1)
  state: number; // int32 STATE_INTS
  x: number; // residual stream (rows, C)
  ln: number; // layernorm output (rows, C)
  qkv: number; // (rows, 3C)
  att: number; // attention output (rows, C)
  proj: number; // projection output (rows, C)
  fc: number; // (rows, 4C)
  act: number; // gelu output (rows, 4C)
  logits: number; // (V)
  scratch: number; // attention partials
  maxRows: number;
}

/** Builds the step for T new rows at the position held in `state`. */
export function decodeStep(m: ModelBuffers, T: number): PlanOp[] {
  if (!Number.isInteger(T) || T < 1 || T > m.maxRows) throw new Error(`decodeStep: T=${T} outside 1..${m.maxRows}`);
  const { n_embd: C, n_head: H, n_positions: maxCtx, vocab_size: V, layer_norm_epsilon: eps } = m.config;
  const plan: PlanOp[] = [];
  const op = (family: OpFamily, label: string, layer: number | null, args: number[], floatArgs?: number[]) =>
    plan.push({ family, label, layer, args, floatArgs });
  const layernorm = (label: string, layer: number | null, norm: { weight: number; bias: number }) =>
    op("layernorm", label, layer, [m.ln, m.x, norm.weight, norm.bias, T, C, eps], [6]);
  const linear = (label: string, layer: number, out: number, inp: number, w: { weight: number; bias: number }, inC: number, outC: number) =>
    op("linear", label, layer, [out, inp, w.weight, w.bias, T, inC, outC]);

  op("embed", "embed", null, [m.x, m.seq, m.state, m.wte, m.wpe, T, C]); //          x = wte[tokens] + wpe[positions]
  m.layers.forEach((w, l) => {
    const h = `h${l}`;
    layernorm(`${h}.ln_1`, l, w.ln_1); //                                             a = ln_1(x)
    linear(`${h}.attn.c_attn`, l, m.qkv, m.ln, w.c_attn, C, 3 * C); //                q, k, v = a @ W_attn
    op("kv_append", `${h}.attn.kv_append`, l, [m.kCache[l]!, m.vCache[l]!, m.qkv, m.state, T, C, maxCtx]); // cache ← k, v
    op("attention", `${h}.attn.attend`, l, //                                          y = softmax(q K^T / √d) V (causal)
      [m.att, m.scratch, m.qkv, m.kCache[l]!, m.vCache[l]!, m.state, T, C, H, maxCtx]);
    linear(`${h}.attn.c_proj`, l, m.proj, m.att, w.attn_c_proj, C, C); //             y @ W_proj
    op("residual", `${h}.attn.residual`, l, [m.x, m.x, m.proj, T * C]); //             x = x + attn
    layernorm(`${h}.ln_2`, l, w.ln_2); //                                             a = ln_2(x)
    linear(`${h}.mlp.c_fc`, l, m.fc, m.ln, w.c_fc, C, 4 * C); //                       f = a @ W_fc
    op("gelu", `${h}.mlp.gelu`, l, [m.act, m.fc, T * 4 * C]); //                        g = gelu(f)
    linear(`${h}.mlp.c_proj`, l, m.proj, m.act, w.mlp_c_proj, 4 * C, C); //            g @ W_proj
    op("residual", `${h}.mlp.residual`, l, [m.x, m.x, m.proj, T * C]); //              x = x + mlp
  });
  layernorm("ln_f", null, m.ln_f); //                                                  a = ln_f(x)
  op("lm_head", "lm_head", null, [m.logits, m.ln, m.wte, T, C, V]); //               logits = a[-1] @ wte^T
  op("argmax", "argmax", null, [m.seq, m.state, m.logits, V, T, maxCtx]); //           next = argmax(logits); pos += T
  return plan;
}

/** Encodes ops as plan records: int64 slots, a float as its bit pattern in the low 32 bits. */
export function encodePlan(ops: PlanOp[]): EncodedPlan {
  const records = new BigInt64Array(ops.length * PLAN_SLOTS);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  ops.forEach((o, i) => {
    if (o.args.length >= PLAN_SLOTS) throw new Error(`${o.label}: ${o.args.length} arguments do not fit a plan record`);
    records[i * PLAN_SLOTS] = BigInt(OP_CODES[o.family]);
    o.args.forEach((a, k) => {
      if (o.floatArgs?.includes(k)) {
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

/**
 * Compiles ops into closures that each make exactly one FFI call with fixed numeric arguments —
 * the analogue of a Python framework dispatching each op (no spreads, no allocation per call).
 */
export function compileEager(ops: PlanOp[], s: OpSymbols): Array<() => void> {
  return ops.map((o): (() => void) => {
    const a = o.args as [number, number, number, number, number, number, number, number, number, number];
    switch (o.family) {
      case "embed": return () => s.op_embed(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
      case "layernorm": return () => s.op_layernorm(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
      case "linear": return () => s.op_linear(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
      case "kv_append": return () => s.op_kv_append(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
      case "attention": return () => s.op_attention(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]);
      case "gelu": return () => s.op_gelu(a[0], a[1], a[2]);
      case "residual": return () => s.op_residual(a[0], a[1], a[2], a[3]);
      case "lm_head": return () => s.op_lm_head(a[0], a[1], a[2], a[3], a[4], a[5]);
      case "argmax": return () => s.op_argmax(a[0], a[1], a[2], a[3], a[4], a[5]);
    }
  });
}

/** A step ready to run in every launch mode the backend has. */
export class CompiledStep {
  readonly eagerCalls: Array<() => void>;
  private recorded: ReturnType<Backend["record"]> | null = null;

  constructor(readonly backend: Backend, readonly ops: PlanOp[]) {
    this.eagerCalls = compileEager(ops, backend.ops);
  }

  /** eager: TypeScript walks the plan, one FFI call per op */
  runEager(): void {
    const calls = this.eagerCalls;
    for (let i = 0; i < calls.length; i++) calls[i]!();
  }

  /** the plan recorded natively once (and captured as a graph on CUDA) */
  native(): ReturnType<Backend["record"]> {
    this.recorded ??= this.backend.record(encodePlan(this.ops));
    return this.recorded;
  }

  destroy(): void {
    this.recorded?.destroy();
    this.recorded = null;
  }
}


/**
 * The float region an op writes, as (pointer, floats), from its arguments in signature order; null for ops
 * that write no float output of their own (kv_append copies c_attn's output; argmax writes token ids).
 */
export function outputOf(op: PlanOp): { ptr: number; floats: number } | null {
  const a = op.args;
  switch (op.family) {
    case "embed": return { ptr: a[0]!, floats: a[5]! * a[6]! }; //       x: (T, C)
    case "layernorm": return { ptr: a[0]!, floats: a[4]! * a[5]! }; //   out: (T, C)
    case "linear": return { ptr: a[0]!, floats: a[4]! * a[6]! }; //      out: (T, OC)
    case "attention": return { ptr: a[0]!, floats: a[6]! * a[7]! }; //   out: (T, C)
    case "gelu": return { ptr: a[0]!, floats: a[2]! }; //                out: (N)
    case "residual": return { ptr: a[0]!, floats: a[3]! }; //            out: (N)
    case "lm_head": return { ptr: a[0]!, floats: a[5]! }; //             logits: (V)
    case "kv_append":
    case "argmax":
      return null;
  }
}
