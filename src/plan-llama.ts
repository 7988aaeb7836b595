// The Llama family's decode step as a list of ops — it reads like the model's math (src/model/llama.ts). The
// unfused plan is one op per step of the math; the fused one runs a decode step of one row per sequence in five
// launches per layer, as GPT-2's does (plan-gpt2.ts): RMSNorm in the next matvec's prologue, RoPE and the cache write in
// the q/k/v matvec's epilogue, silu(gate) · up in the gate/up matvec's, the residual adds in o and down's, argmax
// in the LM head; Qwen3's per-head q/k norms in the rotation's epilogue, once a head's last column tile is merged.
import type { LlamaConfig } from "./model/llama.ts";
import type { OpArgs, OpFamily } from "./ops.ts";
import { dtypeCodes, PLACEHOLDER_POINTER, planOp, type PlanKind, type PlanOp, type StepForm } from "./plan.ts";

/** A linear's device buffers: its input-first matrix and its bias (zeros where the model has none). */
export interface Linear {
  weight: number;
  bias: number;
}

export interface LlamaLayerBuffers {
  input_layernorm: number;
  qkv: Linear; // (C, Q + 2 KV)
  q_norm: number; // (head_dim), 0 without q/k norms
  k_norm: number;
  o_proj: Linear; // (Q, C)
  post_attention_layernorm: number;
  gate_up: Linear; // (C, 2 I)
  down: Linear; // (I, C)
}

/** Everything a Llama-family step touches, as device pointers, for `batch` sequences (cuda/ops.h's batched layout). */
export interface LlamaBuffers {
  config: LlamaConfig;
  batch: number;
  dtypes: { weights: number; kv: number };
  embed_tokens: number; // (V, C)
  layers: LlamaLayerBuffers[];
  norm: number; // (C)
  lm_head: number; // (V, C): embed_tokens where tied
  rope: number; // (max_ctx, head_dim) cos | sin
  kCache: number[]; // per layer (batch, max_ctx, KV)
  vCache: number[];
  seq: number; // int32 (batch, max_ctx + 1)
  /** where a several-row step's argmax writes each sequence's next token: seq, or sink (plan-gpt2.ts ModelBuffers) */
  next: number;
  sink: number;
  state: number; // int32 (batch, STATE_INTS)
  x: number; // residual stream (rows, C)
  ln: number; // RMSNorm output (rows, C)
  qkv: number; // (rows, Q + 2 KV)
  att: number; // attention output (rows, Q)
  proj: number; // projection output (rows, C)
  fc: number; // gate | up (rows, 2 I)
  act: number; // silu(gate) * up (rows, I)
  logits: number; // (batch, V)
  scratch: number; // attention partials
  partials: number; // per-block partials of the merging ops
  maxRows: number;
}

/** The step for T new rows of each of the buffers' sequences, at the positions held in `state`. */
export function llamaStep(m: LlamaBuffers, T: number, kind: PlanKind): PlanOp[] {
  const rows = m.batch * T;
  if (!Number.isInteger(T) || T < 1 || rows > m.maxRows)
    throw new Error(`llamaStep: ${m.batch} × T=${T} rows outside 1..${m.maxRows}`);
  return kind === "fused" && T === 1 ? fusedLlamaStep(m) : unfusedLlamaStep(m, T);
}

/** One launch per op, for T rows of each sequence. */
function unfusedLlamaStep(m: LlamaBuffers, T: number): PlanOp[] {
  const rows = m.batch * T;
  const cfg = m.config;
  const { n_embd: C, n_head, n_kv_head, head_dim, intermediate_size: I, vocab_size: V, rms_norm_eps: eps } = cfg;
  const { n_positions: max_ctx } = cfg;
  const Q = n_head * head_dim,
    KV = n_kv_head * head_dim;
  const {
    batch: B,
    dtypes: { weights: wdtype, kv: kvdtype },
    state,
  } = m;
  const plan: PlanOp[] = [];
  const op = <F extends OpFamily>(family: F, label: string, layer: number | null, args: OpArgs<F>) =>
    plan.push(planOp(family, label, layer, args));
  const rmsnorm = (label: string, layer: number | null, weight: number) =>
    op("rmsnorm", label, layer, { out: m.ln, inp: m.x, weight, rows, C, eps });
  const linear = (label: string, layer: number, out: number, inp: number, w: Linear, inC: number, OC: number) =>
    op("linear", label, layer, { out, partials: m.partials, inp, ...w, rows, C: inC, OC, wdtype });
  const residual = (label: string, layer: number) =>
    op("residual", label, layer, { out: m.x, a: m.x, b: m.proj, N: rows * C });

  op("embed", "embed", null, { out: m.x, seq: m.seq, state, wte: m.embed_tokens, wpe: 0, B, T, C, max_ctx, wdtype }); // x = embed[tokens]
  m.layers.forEach((w, l) => {
    const h = `layers.${l}`;
    const [k_cache, v_cache] = [m.kCache[l]!, m.vCache[l]!];
    rmsnorm(`${h}.input_layernorm`, l, w.input_layernorm); //                               a = rmsnorm(x)
    linear(`${h}.self_attn.qkv_proj`, l, m.qkv, m.ln, w.qkv, C, Q + 2 * KV); //             q, k, v = a @ W_qkv + b
    op("rope", `${h}.self_attn.rope`, l, {
      qkv: m.qkv,
      state,
      rope: m.rope,
      q_norm: w.q_norm,
      k_norm: w.k_norm,
      B,
      T,
      C: Q,
      n_head,
      n_kv_head,
      max_ctx,
      eps,
    }); //                                                                                   q, k = rope(norm(q), norm(k))
    op("kv_append", `${h}.self_attn.kv_append`, l, {
      k_cache,
      v_cache,
      qkv: m.qkv,
      state,
      B,
      T,
      C: Q,
      kv_C: KV,
      max_ctx,
      kvdtype,
    }); //                                                                                   cache ← k, v
    op("attention", `${h}.self_attn.attend`, l, {
      out: m.att,
      scratch: m.scratch,
      qkv: m.qkv,
      k_cache,
      v_cache,
      state,
      B,
      T,
      C: Q,
      n_head,
      n_kv_head,
      max_ctx,
      kvdtype,
    }); //                                                                                   y = softmax(q K^T / √d) V, GQA
    linear(`${h}.self_attn.o_proj`, l, m.proj, m.att, w.o_proj, Q, C); //                   y @ W_o
    residual(`${h}.self_attn.residual`, l); //                                               x = x + attn
    rmsnorm(`${h}.post_attention_layernorm`, l, w.post_attention_layernorm); //             a = rmsnorm(x)
    linear(`${h}.mlp.gate_up_proj`, l, m.fc, m.ln, w.gate_up, C, 2 * I); //                 g, u = a @ W_gate, a @ W_up
    op("swiglu", `${h}.mlp.swiglu`, l, { out: m.act, gate_up: m.fc, rows, I }); //          s = silu(g) * u
    linear(`${h}.mlp.down_proj`, l, m.proj, m.act, w.down, I, C); //                         s @ W_down
    residual(`${h}.mlp.residual`, l); //                                                     x = x + mlp
  });
  rmsnorm("norm", null, m.norm); //                                                          a = rmsnorm(x)
  op("lm_head", "lm_head", null, { logits: m.logits, inp: m.ln, wte: m.lm_head, B, T, C, V, wdtype }); // logits = a[-1] @ lm_head^T
  op("argmax", "argmax", null, { seq: m.next, state, partials: m.partials, logits: m.logits, B, V, T, max_ctx }); // next = argmax; pos += T
  return plan;
}

/** The same math for one row per sequence, the fused decode ops in five launches per layer. */
function fusedLlamaStep(m: LlamaBuffers): PlanOp[] {
  const cfg = m.config;
  const { n_embd: C, n_head, n_kv_head, head_dim, intermediate_size: I, vocab_size: V, rms_norm_eps: eps } = cfg;
  const { n_positions: max_ctx } = cfg;
  const Q = n_head * head_dim;
  const {
    batch: B,
    dtypes: { weights: wdtype, kv: kvdtype },
    state,
    partials,
    x,
  } = m;
  const plan: PlanOp[] = [];
  const op = <F extends OpFamily>(family: F, label: string, layer: number | null, args: OpArgs<F>) =>
    plan.push(planOp(family, label, layer, args));

  op("embed", "embed", null, { out: x, seq: m.seq, state, wte: m.embed_tokens, wpe: 0, B, T: 1, C, max_ctx, wdtype }); // x = embed[token]
  m.layers.forEach((w, l) => {
    const h = `layers.${l}`;
    const [k_cache, v_cache] = [m.kCache[l]!, m.vCache[l]!];
    op("rms_qkv_rope", `${h}.self_attn.rms_qkv_rope`, l, {
      qkv: m.qkv,
      k_cache,
      v_cache,
      partials,
      x,
      ln_weight: w.input_layernorm,
      ...w.qkv,
      state,
      rope: m.rope,
      q_norm: w.q_norm,
      k_norm: w.k_norm,
      B,
      C,
      n_head,
      n_kv_head,
      head_dim,
      max_ctx,
      eps,
      wdtype,
      kvdtype,
    }); //                                        q, k, v = rope(norm(rmsnorm(x) @ W_qkv + b)); cache ← k, v
    op("attention", `${h}.self_attn.attend`, l, {
      out: m.att,
      scratch: m.scratch,
      qkv: m.qkv,
      k_cache,
      v_cache,
      state,
      B,
      T: 1,
      C: Q,
      n_head,
      n_kv_head,
      max_ctx,
      kvdtype,
    }); //                                                                                   y = softmax(q K^T / √d) V, GQA
    op("linear_residual", `${h}.self_attn.o_proj`, l, { x, partials, inp: m.att, ...w.o_proj, B, C: Q, OC: C, wdtype }); // x = x + y @ W_o
    op("rms_gate_up", `${h}.mlp.rms_gate_up`, l, {
      out: m.act,
      partials,
      x,
      ln_weight: w.post_attention_layernorm,
      ...w.gate_up,
      B,
      C,
      I,
      eps,
      wdtype,
    }); //                                                                                   s = silu(a @ W_gate) * (a @ W_up), a = rmsnorm(x)
    op("linear_residual", `${h}.mlp.down_proj`, l, { x, partials, inp: m.act, ...w.down, B, C: I, OC: C, wdtype }); // x = x + s @ W_down
  });
  op("rms_lm_head_argmax", "norm.lm_head.argmax", null, {
    logits: m.logits,
    seq: m.seq,
    state,
    partials,
    x,
    ln_weight: m.norm,
    wte: m.lm_head,
    B,
    C,
    V,
    max_ctx,
    eps,
    wdtype,
  }); //                                                         logits = rmsnorm(x) @ lm_head^T; next = argmax; pos += 1
  return plan;
}

/** The step's shape without a backend (plan-gpt2.ts planShape): every pointer a placeholder, q/k norms where the model has them. */
export function llamaPlanShape(config: LlamaConfig, T: number, form: StepForm): PlanOp[] {
  const at = PLACEHOLDER_POINTER;
  const linear = { weight: at, bias: at };
  const norms = config.qk_norm ? at : 0;
  const layer: LlamaLayerBuffers = {
    input_layernorm: at,
    qkv: linear,
    q_norm: norms,
    k_norm: norms,
    o_proj: linear,
    post_attention_layernorm: at,
    gate_up: linear,
    down: linear,
  };
  const everyLayer = Array.from({ length: config.n_layer }, () => at);
  const buffers: LlamaBuffers = {
    config,
    batch: form.batch,
    dtypes: dtypeCodes(form),
    embed_tokens: at,
    layers: everyLayer.map(() => layer),
    norm: at,
    lm_head: at,
    rope: at,
    kCache: everyLayer,
    vCache: everyLayer,
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
    maxRows: form.batch * T,
  };
  return llamaStep(buffers, T, form.plan);
}
