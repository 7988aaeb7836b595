// Plain TypeScript references of the decode ops, in float64: the oracle the native ops are checked against.
// Shapes as in cuda/ops.h. Weights and caches stored as bf16/f16 are given as the values they hold (rounded
// with src/model/dtypes.ts, or read back and widened), so every reference runs on what the op reads.

/** out: (T, C) = wte[seq[pos + t]] + wpe[pos + t] */
export function embedRef(
  seq: Int32Array,
  pos: number,
  wte: ArrayLike<number>,
  wpe: ArrayLike<number>,
  T: number,
  C: number,
): Float64Array {
  const out = new Float64Array(T * C);
  for (let t = 0; t < T; t++)
    for (let c = 0; c < C; c++) out[t * C + c] = wte[seq[pos + t]! * C + c]! + wpe[(pos + t) * C + c]!;
  return out;
}

/** out: (T, C) */
export function layernormRef(
  inp: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number>,
  T: number,
  C: number,
  eps: number,
): Float64Array {
  const out = new Float64Array(T * C);
  for (let t = 0; t < T; t++) {
    let mean = 0;
    for (let c = 0; c < C; c++) mean += inp[t * C + c]!;
    mean /= C;
    let v = 0;
    for (let c = 0; c < C; c++) v += (inp[t * C + c]! - mean) ** 2;
    const rstd = 1 / Math.sqrt(v / C + eps);
    for (let c = 0; c < C; c++) out[t * C + c] = (inp[t * C + c]! - mean) * rstd * w[c]! + b[c]!;
  }
  return out;
}

/** out: (T, OC) = inp (T, C) @ w (C, OC) + b */
export function linearRef(
  inp: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number>,
  T: number,
  C: number,
  OC: number,
): Float64Array {
  const out = new Float64Array(T * OC);
  for (let t = 0; t < T; t++)
    for (let o = 0; o < OC; o++) {
      let s = b[o]!;
      for (let c = 0; c < C; c++) s += inp[t * C + c]! * w[c * OC + o]!;
      out[t * OC + o] = s;
    }
  return out;
}

/**
 * out: (T, C); query t at position pos + t over cache rows [0, pos + t] of k, v: (max_ctx, kv_C), kv_C = nKv · hs;
 * query head h reads K/V head h / (nHead / nKv)
 */
export function attentionRef(
  q: ArrayLike<number>,
  qStride: number,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  pos: number,
  T: number,
  C: number,
  nHead: number,
  nKv = nHead,
): Float64Array {
  const hs = C / nHead,
    kvC = nKv * hs;
  const out = new Float64Array(T * C);
  for (let t = 0; t < T; t++)
    for (let h = 0; h < nHead; h++) {
      const kvAt = Math.floor(h / (nHead / nKv)) * hs;
      const keys = pos + t + 1;
      const scores = new Float64Array(keys);
      let max = -Infinity;
      for (let j = 0; j < keys; j++) {
        let d = 0;
        for (let i = 0; i < hs; i++) d += q[t * qStride + h * hs + i]! * k[j * kvC + kvAt + i]!;
        scores[j] = d / Math.sqrt(hs);
        max = Math.max(max, scores[j]!);
      }
      let total = 0;
      for (let j = 0; j < keys; j++) total += scores[j] = Math.exp(scores[j]! - max);
      for (let i = 0; i < hs; i++) {
        let s = 0;
        for (let j = 0; j < keys; j++) s += (scores[j]! / total) * v[j * kvC + kvAt + i]!;
        out[t * C + h * hs + i] = s;
      }
    }
  return out;
}

export function geluRef(inp: ArrayLike<number>): Float64Array {
  return Float64Array.from(inp, (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))));
}

export function residualRef(a: ArrayLike<number>, b: ArrayLike<number>): Float64Array {
  return Float64Array.from(a, (x, i) => x + b[i]!);
}

/** logits: (V) = inp[T - 1] @ wte^T */
export function lmHeadRef(
  inp: ArrayLike<number>,
  wte: ArrayLike<number>,
  T: number,
  C: number,
  V: number,
): Float64Array {
  const out = new Float64Array(V);
  for (let v = 0; v < V; v++) {
    let s = 0;
    for (let c = 0; c < C; c++) s += inp[(T - 1) * C + c]! * wte[v * C + c]!;
    out[v] = s;
  }
  return out;
}

/** cuda/ops.h: the lowest index wins a tie, NaN is never chosen, 0 when every logit is NaN. */
export function argmaxRef(logits: Float32Array): number {
  let best = -1;
  for (let v = 0; v < logits.length; v++) if (best < 0 ? logits[v]! >= -Infinity : logits[v]! > logits[best]!) best = v;
  return Math.max(best, 0);
}

export { maxRelativeError, NAN_WORD, randomFloats } from "../../src/verify/compare.ts";

/**
 * GPT-2 in float64 on the given weights (by Hugging Face name, as the model stores them: bf16/f16 weights given
 * as the values they hold): logits (len, V) at every position of `ids`. `storeKv` is what the KV cache does to a
 * key or value it stores (identity for fp32; rounding for bf16/f16), since attention reads them from the cache.
 * With n_kv_head, c_attn's row is [q (C) | k (kv_C) | v (kv_C)], kv_C = n_kv_head · C / n_head (grouped-query).
 */
export function gpt2Ref(
  w: ReadonlyMap<string, ArrayLike<number>>,
  cfg: {
    n_layer: number;
    n_head: number;
    n_kv_head?: number;
    n_embd: number;
    vocab_size: number;
    layer_norm_epsilon: number;
  },
  ids: readonly number[],
  storeKv: (x: number) => number = (x) => x,
): Float64Array {
  const T = ids.length,
    C = cfg.n_embd,
    V = cfg.vocab_size,
    eps = cfg.layer_norm_epsilon;
  const nKv = cfg.n_kv_head ?? cfg.n_head,
    kvC = (nKv * C) / cfg.n_head,
    QKV = C + 2 * kvC;
  const p = (name: string) => w.get(name)!;
  const norm = (x: ArrayLike<number>, name: string) =>
    layernormRef(x, p(`${name}.weight`), p(`${name}.bias`), T, C, eps);
  const linear = (x: ArrayLike<number>, name: string, inC: number, outC: number) =>
    linearRef(x, p(`${name}.weight`), p(`${name}.bias`), T, inC, outC);
  let x: Float64Array = embedRef(Int32Array.from(ids), 0, p("wte.weight"), p("wpe.weight"), T, C);
  for (let l = 0; l < cfg.n_layer; l++) {
    const h = `h.${l}`;
    const qkv = linear(norm(x, `${h}.ln_1`), `${h}.attn.c_attn`, C, QKV);
    const cached = (part: number) =>
      Float64Array.from({ length: T * kvC }, (_, i) =>
        storeKv(qkv[Math.floor(i / kvC) * QKV + C + part * kvC + (i % kvC)]!),
      );
    const att = attentionRef(qkv, QKV, cached(0), cached(1), 0, T, C, cfg.n_head, nKv);
    x = residualRef(x, linear(att, `${h}.attn.c_proj`, C, C));
    const act = geluRef(linear(norm(x, `${h}.ln_2`), `${h}.mlp.c_fc`, C, 4 * C));
    x = residualRef(x, linear(act, `${h}.mlp.c_proj`, 4 * C, C));
  }
  const f = norm(x, "ln_f");
  const logits = new Float64Array(T * V);
  for (let t = 0; t < T; t++) logits.set(lmHeadRef(f.subarray(t * C, (t + 1) * C), p("wte.weight"), 1, C, V), t * V);
  return logits;
}
