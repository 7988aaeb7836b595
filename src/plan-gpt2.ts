// GPT-2's decode step as a list of ops, built from the config — it reads like GPT-2's math. The unfused plan is one
// op per step of the math; the fused one runs a decode step of one row per sequence in five launches per layer.
import { kvHeads, kvWidth, type GPT2Config } from "./model/gpt2.ts";
import type { OpArgs, OpFamily } from "./ops.ts";
import {
  dtypeCodes,
  DEFAULT_STEP_FORM,
  PLACEHOLDER_POINTER,
  planOp,
  type PlanKind,
  type PlanOp,
  type StepForm,
} from "./plan.ts";

/** Device buffers of one layer's weights. */
export interface LayerBuffers {
  ln_1: { weight: number; bias: number };
  c_attn: { weight: number; bias: number };
  attn_c_proj: { weight: number; bias: number };
  ln_2: { weight: number; bias: number };
  c_fc: { weight: number; bias: number };
  mlp_c_proj: { weight: number; bias: number };
}

/**
 * Everything a step touches, as device pointers, for `batch` sequences (cuda/ops.h's batched layout).
 * Weights are stored in dtypes.weights, the KV cache in dtypes.kv (DTYPES codes). Activations hold up to
 * `maxRows` rows (batch × T of a step).
 */
export interface ModelBuffers {
  config: GPT2Config;
  batch: number;
  dtypes: { weights: number; kv: number };
  wte: number; // (V, C)
  wpe: number; // (max_ctx, C)
  layers: LayerBuffers[];
  ln_f: { weight: number; bias: number };
  kCache: number[]; // per layer (batch, max_ctx, kv_C)
  vCache: number[];
  seq: number; // int32 (batch, max_ctx + 1)
  /** where a several-row step's argmax writes each sequence's next token: seq, or sink (int32 (batch, max_ctx + 1)) */
  next: number;
  /** for a pass whose next token is the prompt's own (passes.ts): written, never read */
  sink: number;
  state: number; // int32 (batch, STATE_INTS)
  x: number; // residual stream (rows, C)
  ln: number; // layernorm output (rows, C)
  qkv: number; // (rows, C + 2 kv_C): [q | k | v]
  att: number; // attention output (rows, C)
  proj: number; // projection output (rows, C)
  fc: number; // (rows, 4C)
  act: number; // gelu output (rows, 4C)
  logits: number; // (batch, V)
  scratch: number; // attention partials
  partials: number; // per-block partials of the ops that merge across blocks (cuda/ops.h op_partials_bytes)
  maxRows: number;
}

/** Builds the step for T new rows of each of the buffers' sequences, at the positions held in `state`. */
export function decodeStep(m: ModelBuffers, T: number, kind: PlanKind = "fused"): PlanOp[] {
  const rows = m.batch * T;
  if (!Number.isInteger(T) || T < 1 || rows > m.maxRows)
    throw new Error(`decodeStep: ${m.batch} × T=${T} rows outside 1..${m.maxRows}`);
  return kind === "fused" && T === 1 ? fusedDecodeStep(m) : unfusedStep(m, T);
}

/** One launch per op, for T rows of each sequence. */
function unfusedStep(m: ModelBuffers, T: number): PlanOp[] {
  const { n_embd: C, n_head, n_positions: max_ctx, vocab_size: V, layer_norm_epsilon: eps } = m.config;
  const n_kv_head = kvHeads(m.config),
    kv_C = kvWidth(m.config);
  const {
    batch: B,
    dtypes: { weights: wdtype, kv: kvdtype },
  } = m;
  const rows = B * T;
  const plan: PlanOp[] = [];
  const op = <F extends OpFamily>(family: F, label: string, layer: number | null, args: OpArgs<F>) =>
    plan.push(planOp(family, label, layer, args));
  const layernorm = (label: string, layer: number | null, norm: { weight: number; bias: number }) =>
    op("layernorm", label, layer, { out: m.ln, inp: m.x, ...norm, rows, C, eps });
  const linear = (
    label: string,
    layer: number,
    out: number,
    inp: number,
    w: { weight: number; bias: number },
    inC: number,
    OC: number,
  ) => op("linear", label, layer, { out, partials: m.partials, inp, ...w, rows, C: inC, OC, wdtype });

  op("embed", "embed", null, {
    out: m.x,
    seq: m.seq,
    state: m.state,
    wte: m.wte,
    wpe: m.wpe,
    B,
    T,
    C,
    max_ctx,
    wdtype,
  }); // x = wte[tokens] + wpe[positions]
  m.layers.forEach((w, l) => {
    const h = `h${l}`;
    const [k_cache, v_cache] = [m.kCache[l]!, m.vCache[l]!];
    layernorm(`${h}.ln_1`, l, w.ln_1); //                                                   a = ln_1(x)
    linear(`${h}.attn.c_attn`, l, m.qkv, m.ln, w.c_attn, C, C + 2 * kv_C); //               q, k, v = a @ W_attn
    op("kv_append", `${h}.attn.kv_append`, l, {
      k_cache,
      v_cache,
      qkv: m.qkv,
      state: m.state,
      B,
      T,
      C,
      kv_C,
      max_ctx,
      kvdtype,
    }); // cache ← k, v
    op(
      "attention",
      `${h}.attn.attend`,
      l, //                                                y = softmax(q K^T / √d) V (causal)
      {
        out: m.att,
        scratch: m.scratch,
        qkv: m.qkv,
        k_cache,
        v_cache,
        state: m.state,
        B,
        T,
        C,
        n_head,
        n_kv_head,
        max_ctx,
        kvdtype,
      },
    );
    linear(`${h}.attn.c_proj`, l, m.proj, m.att, w.attn_c_proj, C, C); //                   y @ W_proj
    op("residual", `${h}.attn.residual`, l, { out: m.x, a: m.x, b: m.proj, N: rows * C }); // x = x + attn
    layernorm(`${h}.ln_2`, l, w.ln_2); //                                                   a = ln_2(x)
    linear(`${h}.mlp.c_fc`, l, m.fc, m.ln, w.c_fc, C, 4 * C); //                             f = a @ W_fc
    op("gelu", `${h}.mlp.gelu`, l, { out: m.act, inp: m.fc, N: rows * 4 * C }); //           g = gelu(f)
    linear(`${h}.mlp.c_proj`, l, m.proj, m.act, w.mlp_c_proj, 4 * C, C); //                  g @ W_proj
    op("residual", `${h}.mlp.residual`, l, { out: m.x, a: m.x, b: m.proj, N: rows * C }); // x = x + mlp
  });
  layernorm("ln_f", null, m.ln_f); //                                                        a = ln_f(x)
  op("lm_head", "lm_head", null, { logits: m.logits, inp: m.ln, wte: m.wte, B, T, C, V, wdtype }); // logits = a[-1] @ wte^T per sequence
  op("argmax", "argmax", null, {
    seq: m.next,
    state: m.state,
    partials: m.partials,
    logits: m.logits,
    B,
    V,
    T,
    max_ctx,
  }); // next = argmax(logits); pos += T
  return plan;
}

/** The same math for one row per sequence, the fused decode ops in five launches per layer. */
function fusedDecodeStep(m: ModelBuffers): PlanOp[] {
  const { n_embd: C, n_head, n_positions: max_ctx, vocab_size: V, layer_norm_epsilon: eps } = m.config;
  const n_kv_head = kvHeads(m.config),
    kv_C = kvWidth(m.config);
  const {
    batch: B,
    dtypes: { weights: wdtype, kv: kvdtype },
  } = m;
  const plan: PlanOp[] = [];
  const op = <F extends OpFamily>(family: F, label: string, layer: number | null, args: OpArgs<F>) =>
    plan.push(planOp(family, label, layer, args));
  const { partials, state, x } = m;
  const ln = (norm: { weight: number; bias: number }) => ({ ln_weight: norm.weight, ln_bias: norm.bias, eps });

  op("embed", "embed", null, { out: x, seq: m.seq, state, wte: m.wte, wpe: m.wpe, B, T: 1, C, max_ctx, wdtype }); // x = wte[token] + wpe[pos]
  m.layers.forEach((w, l) => {
    const h = `h${l}`;
    const [k_cache, v_cache] = [m.kCache[l]!, m.vCache[l]!];
    op(
      "ln_qkv",
      `${h}.attn.ln_qkv`,
      l, //                                                  q, k, v = ln_1(x) @ W_attn; cache ← k, v
      {
        qkv: m.qkv,
        k_cache,
        v_cache,
        partials,
        x,
        ...ln(w.ln_1),
        ...w.c_attn,
        state,
        B,
        C,
        kv_C,
        max_ctx,
        wdtype,
        kvdtype,
      },
    );
    op(
      "attention",
      `${h}.attn.attend`,
      l, //                                                y = softmax(q K^T / √d) V (causal)
      {
        out: m.att,
        scratch: m.scratch,
        qkv: m.qkv,
        k_cache,
        v_cache,
        state,
        B,
        T: 1,
        C,
        n_head,
        n_kv_head,
        max_ctx,
        kvdtype,
      },
    );
    op("linear_residual", `${h}.attn.c_proj`, l, { x, partials, inp: m.att, ...w.attn_c_proj, B, C, OC: C, wdtype }); //  x = x + y @ W_proj
    op(
      "ln_linear_gelu",
      `${h}.mlp.ln_c_fc`,
      l, //                                          g = gelu(ln_2(x) @ W_fc)
      { out: m.act, partials, x, ...ln(w.ln_2), ...w.c_fc, B, C, OC: 4 * C, wdtype },
    );
    op("linear_residual", `${h}.mlp.c_proj`, l, {
      x,
      partials,
      inp: m.act,
      ...w.mlp_c_proj,
      B,
      C: 4 * C,
      OC: C,
      wdtype,
    }); // x = x + g @ W_proj
  });
  op(
    "ln_lm_head_argmax",
    "ln_f.lm_head.argmax",
    null, //                                    logits = ln_f(x) @ wte^T; next = argmax; pos += 1
    { logits: m.logits, seq: m.seq, state, partials, x, ...ln(m.ln_f), wte: m.wte, B, C, V, max_ctx, wdtype },
  );
  return plan;
}

/**
 * The plan's shape without a backend: every pointer PLACEHOLDER_POINTER. Its ops have the real families, labels,
 * sizes and work — what the work model counts — and must never run.
 */
export function planShape(config: GPT2Config, T: number, form: StepForm = DEFAULT_STEP_FORM): PlanOp[] {
  const at = PLACEHOLDER_POINTER;
  const pair = { weight: at, bias: at };
  const layer: LayerBuffers = { ln_1: pair, c_attn: pair, attn_c_proj: pair, ln_2: pair, c_fc: pair, mlp_c_proj: pair };
  const nowhere = {
    wte: at,
    wpe: at,
    seq: at,
    next: at,
    sink: at,
    state: at,
    x: at,
    ln: at,
    qkv: at,
    att: at,
    proj: at,
    fc: at,
    act: at,
    logits: at,
    scratch: at,
    partials: at,
  };
  const everyLayer = Array.from({ length: config.n_layer }, () => at);
  const buffers: ModelBuffers = {
    config,
    batch: form.batch,
    dtypes: dtypeCodes(form),
    ...nowhere,
    layers: everyLayer.map(() => layer),
    ln_f: pair,
    kCache: everyLayer,
    vCache: everyLayer,
    maxRows: form.batch * T,
  };
  return decodeStep(buffers, T, form.plan);
}
