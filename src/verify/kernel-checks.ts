// Every op of a device backend (the CUDA kernels, or their sources emulated on the CPU) against its CPU
// twin, on fresh random inputs, with outputs poisoned (NaN) first so that an unwritten element fails.
// Tolerance: max |device − cpu| / max |cpu| over each output ≤ 1e-4; argmax's seq and state exactly.
// Every case also keeps the device's outputs, so that a second run (the emulator in another schedule) can be
// compared with the first bit for bit.
import type { Backend } from "../backends/backend.ts";
import { DTYPES } from "../ops.ts";
import type { DeviceArena } from "./arena.ts";
import { BATCH_DTYPE_CASES } from "./batch-checks.ts";
import { maxRelativeError, randomFloats } from "./compare.ts";
import {
  expectedArgmax,
  KERNEL_TOLERANCE,
  Pair,
  randomMatrix,
  ropeTable,
  stateAt,
  type KernelCase,
} from "./kernel-case.ts";

export { expectedArgmax, KERNEL_TOLERANCE, type KernelCase };

/** fp32 weights and cache (cuda/ops.h storage types) */
const F32 = DTYPES.f32;

export interface KernelRow {
  kernel: string;
  shape: string;
  /** the largest relative error over the case's outputs */
  error: number;
  /** whether a second run gave the device's outputs bit for bit (null: the case ran once) */
  repeatable: boolean | null;
  ok: boolean;
}

const embedCases = (
  [
    [1, 768],
    [4, 128],
    [3, 1600],
    [2, 130],
  ] as const
).map(
  ([T, C]): KernelCase => ({
    kernel: "embed",
    shape: `T=${T} C=${C}`,
    run: (pair, seed) => {
      const V = 1001,
        maxCtx = 64,
        pos = 9;
      const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 7919 + seed) % V);
      return pair.compare(
        { seq, state: stateAt(pos), wte: randomFloats(V * C, seed + 1), wpe: randomFloats(maxCtx * C, seed + 2) },
        { out: T * C },
        (b, p) => b.ops.op_embed(p.out!, p.seq!, p.state!, p.wte!, p.wpe!, 1, T, C, maxCtx, F32),
      );
    },
  }),
);

const layernormCases = (
  [
    [1, 768],
    [7, 128],
    [2, 1600],
    [3, 100],
  ] as const
).map(
  ([T, C]): KernelCase => ({
    kernel: "layernorm",
    shape: `T=${T} C=${C}`,
    run: (pair, seed) =>
      pair.compare(
        { inp: randomFloats(T * C, seed + C, 3), w: randomFloats(C, seed + 3), b: randomFloats(C, seed + 4) },
        { out: T * C },
        (b, p) => b.ops.op_layernorm(p.out!, p.inp!, p.w!, p.b!, T, C, 1e-5),
      ),
  }),
);

const LINEAR_SHAPES = [
  [1, 768, 2304],
  [1, 768, 768],
  [1, 768, 3072],
  [1, 3072, 768],
  [1, 1600, 6400],
  [1, 6400, 1600],
  [1, 128, 384],
  [1, 96, 101], // OC % 4 != 0: the scalar matvec
  [5, 768, 2304],
  [64, 128, 512],
  [33, 100, 70],
  [2, 3072, 768],
] as const;
const linearCases = LINEAR_SHAPES.map(
  ([T, C, OC]): KernelCase => ({
    kernel: "linear",
    shape: `T=${T} C=${C} OC=${OC}`,
    run: (pair, seed) =>
      pair.compare(
        { inp: randomFloats(T * C, seed + 5), w: randomMatrix(C, OC, seed + 6), b: randomFloats(OC, seed + 7) },
        { out: T * OC },
        (b, p) => b.ops.op_linear(p.out!, p.partials!, p.inp!, p.w!, p.b!, T, C, OC, F32),
      ),
  }),
);

const elementwiseCases = [1, 1000, 100_003, 768 * 4 * 5].flatMap((N): KernelCase[] => [
  {
    kernel: "gelu",
    shape: `N=${N}`,
    run: (pair, seed) =>
      pair.compare({ a: randomFloats(N, seed + 8, 4) }, { out: N }, (b, p) => b.ops.op_gelu(p.out!, p.a!, N)),
  },
  {
    kernel: "residual",
    shape: `N=${N}`,
    run: (pair, seed) =>
      pair.compare({ a: randomFloats(N, seed + 9), b: randomFloats(N, seed + 10) }, { out: N }, (b, p) =>
        b.ops.op_residual(p.out!, p.a!, p.b!, N),
      ),
  },
]);

/** GELU's negative tail, where 0.5 x (1 + tanh u) cancels: each element's error relative to that element. */
const geluTail: KernelCase = {
  kernel: "gelu",
  shape: "N=81, x in -10..-2 (the negative tail), each element against itself",
  run: (pair) => {
    const x = Float32Array.from({ length: 81 }, (_, i) => -10 + i / 10);
    const on = (arena: DeviceArena) => {
      const out = arena.poisoned(x.length);
      arena.backend.ops.op_gelu(out.ptr, arena.put(x).ptr, x.length);
      return arena.floats(out);
    };
    const got = on(pair.device),
      want = on(pair.cpu);
    pair.note("out", got);
    return Math.max(...Array.from(got, (g, i) => maxRelativeError(Float32Array.of(g), Float32Array.of(want[i]!))));
  },
};

const residualInPlace: KernelCase = {
  kernel: "residual",
  shape: "N=4099, out aliases a",
  run: (pair, seed) => {
    const N = 4099;
    const a = randomFloats(N, seed + 11),
      bIn = randomFloats(N, seed + 12);
    const on = (arena: DeviceArena) => {
      const pa = arena.put(a);
      arena.backend.ops.op_residual(pa.ptr, pa.ptr, arena.put(bIn).ptr, N);
      return arena.floats(pa);
    };
    const got = on(pair.device);
    pair.note("out", got);
    return maxRelativeError(got, on(pair.cpu));
  },
};

const lmHeadCases = (
  [
    [1, 768, 50257],
    [3, 128, 1001],
    [1, 1600, 5003],
    [2, 130, 999],
  ] as const
).map(
  ([T, C, V]): KernelCase => ({
    kernel: "lm_head",
    shape: `T=${T} C=${C} V=${V}`,
    run: (pair, seed) =>
      pair.compare(
        { inp: randomFloats(T * C, seed + 13), wte: randomFloats(V * C, seed + 14, 0.1) },
        { logits: V },
        (b, p) => b.ops.op_lm_head(p.logits!, p.inp!, p.wte!, 1, T, C, V, F32),
      ),
  }),
);

/** The logits an argmax case scans: random, with a pattern that makes the rule matter. */
type ArgmaxPattern = "tie" | "nan" | "all-nan";
function argmaxLogits(V: number, seed: number, pattern: ArgmaxPattern): Float32Array {
  const logits = randomFloats(V, seed);
  const top = logits.reduce((m, x) => Math.max(m, x), -Infinity) + 1;
  if (pattern === "tie") logits[Math.floor(V / 2)] = logits[V - 1] = top; // the lower index must win
  if (pattern === "nan") {
    for (let i = 0; i < V; i += 7) logits[i] = NaN; // index 0 among them: NaN is never chosen
    logits[V - 2] = top;
  }
  if (pattern === "all-nan") logits.fill(NaN); // the token is 0
  return logits;
}

/** argmax: seq and state must match the CPU's and the rule exactly (error 0 or ∞). */
const argmaxCases = (
  [
    [50257, 1, 5, 1024, "tie"],
    [1001, 1, 63, 64, "tie"],
    [1001, 1, 64, 64, "tie"],
    [999, 4, 60, 64, "tie"],
    [3, 2, 10, 64, "tie"],
    [50257, 1, 5, 1024, "nan"],
    [5003, 1, 5, 64, "all-nan"],
  ] as const
).map(
  ([V, T, pos, maxCtx, pattern]): KernelCase => ({
    kernel: "argmax",
    shape: `V=${V} T=${T} pos=${pos} max_ctx=${maxCtx} ${pattern}`,
    run: (pair, seed) => {
      const logits = argmaxLogits(V, seed + 15 + pos, pattern);
      const on = (arena: DeviceArena) => {
        const seq = arena.put(Int32Array.from({ length: maxCtx + 1 }, (_, i) => -1 - i));
        const state = arena.put(stateAt(pos));
        arena.backend.ops.op_argmax(seq.ptr, state.ptr, pair.partials(arena), arena.put(logits).ptr, 1, V, T, maxCtx);
        return Int32Array.of(...arena.ints(seq), ...arena.ints(state));
      };
      const got = on(pair.device),
        want = on(pair.cpu);
      pair.note("seq+state", got);
      const next = pos + T <= maxCtx ? want[pos + T] === expectedArgmax(logits) : true;
      return got.every((x, i) => x === want[i]) && want[maxCtx + 1] === pos + T && next ? 0 : Infinity;
    },
  }),
);

/**
 * kv_append then attention for T new rows at pos, nKv K/V heads (nHead by default: multi-head): the cache rows
 * exactly, the output within tolerance.
 */
export function attentionCase(
  T: number,
  pos: number,
  C: number,
  nHead: number,
  maxCtx: number,
  nKv: number = nHead,
): KernelCase {
  const kvC = (C / nHead) * nKv;
  return {
    kernel: "kv_append+attention",
    shape: `T=${T} pos=${pos} C=${C} heads=${nHead}${nKv === nHead ? "" : `/${nKv}`} max_ctx=${maxCtx}`,
    run: (pair, seed) => {
      const qkv = randomFloats(T * (C + 2 * kvC), seed + 20 + pos, 2);
      const k = randomFloats(maxCtx * kvC, seed + 21),
        v = randomFloats(maxCtx * kvC, seed + 22);
      const on = (arena: DeviceArena) => {
        const b = arena.backend;
        const pk = arena.put(k),
          pv = arena.put(v),
          pq = arena.put(qkv),
          st = arena.put(stateAt(pos));
        const scratchBytes = b.attentionScratchBytes(T, C, nHead, nKv, maxCtx);
        const scratch = scratchBytes > 0 ? arena.zeroed(scratchBytes / 4).ptr : 0;
        const out = arena.poisoned(T * C);
        b.ops.op_kv_append(pk.ptr, pv.ptr, pq.ptr, st.ptr, 1, T, C, kvC, maxCtx, F32);
        b.ops.op_attention(out.ptr, scratch, pq.ptr, pk.ptr, pv.ptr, st.ptr, 1, T, C, nHead, nKv, maxCtx, F32);
        return { out: arena.floats(out), k: arena.floats(pk), v: arena.floats(pv) };
      };
      const got = on(pair.device),
        want = on(pair.cpu);
      pair.note("out", got.out);
      const cacheExact = maxRelativeError(got.k, want.k) === 0 && maxRelativeError(got.v, want.v) === 0;
      return cacheExact ? maxRelativeError(got.out, want.out) : Infinity;
    },
  };
}

const ATTENTION_SHAPES = [
  [1, 0, 768, 12, 1024],
  [1, 63, 768, 12, 1024],
  [1, 64, 768, 12, 1024],
  [1, 700, 768, 12, 1024],
  [1, 1023, 768, 12, 1024],
  [4, 1020, 768, 12, 1024],
  [6, 10, 768, 12, 1024],
  [3, 61, 128, 2, 64],
  [5, 0, 128, 2, 64],
  [1, 200, 1600, 25, 256],
  [2, 30, 96, 3, 40], // head size 32, a partial last chunk
  [1, 100, 1024, 8, 128], // head size 128
  [2, 20, 90, 3, 64], // head size 30: scalar key reads
] as const;

/** Grouped-query attention: [T, pos, C, heads, K/V heads, max_ctx] (Llama-3.2-1B's 32/8 × 64, MQA, Qwen3's 128). */
const GQA_SHAPES = [
  [1, 100, 2048, 32, 8, 256],
  [1, 70, 448, 7, 1, 128],
  [3, 40, 512, 4, 2, 64],
  [1, 5, 128, 2, 1, 16],
  [7, 0, 256, 4, 2, 64],
  [1, 130, 1024, 4, 2, 256], // head size 256: the wide kernel
  [3, 61, 768, 4, 1, 128], // head size 192, past the fast path's 128
  [1, 1500, 576, 9, 3, 1536], // SmolLM2's heads at a longer context: the CPU's 80-key ranges and a partial one
  [1, 1200, 1024, 8, 4, 1280], // head size 128 there
  [1, 700, 2048, 16, 2, 768], // head size 128 shared by 8: the CPU's 2-head passes
  [1, 3000, 2048, 32, 8, 4096], // 47 chunks over 33 splits: a split's running softmax over two of them
  [2, 3000, 1024, 16, 16, 4096], // 17 splits of three chunks, for each of two rows
  [1, 2500, 1024, 4, 4, 4096], // heads of 256 (the wide kernel, one block per SM) over two chunks a split
] as const;

// ---- the Llama family's ops ---------------------------------------------------------------------------------
const rmsnormCases = (
  [
    [1, 2048],
    [5, 576],
    [3, 100],
    [2, 4096],
  ] as const
).map(
  ([rows, C]): KernelCase => ({
    kernel: "rmsnorm",
    shape: `rows=${rows} C=${C}`,
    run: (pair, seed) =>
      pair.compare(
        { inp: randomFloats(rows * C, seed + 80, 3), w: randomFloats(C, seed + 81) },
        { out: rows * C },
        (b, p) => b.ops.op_rmsnorm(p.out!, p.inp!, p.w!, rows, C, 1e-6),
      ),
  }),
);

/** rope on T rows at pos (rows past max_ctx untouched), with or without Qwen3's q/k norms. */
const ropeCases = (
  [
    [1, 9, 2048, 32, 8, 64, false],
    [3, 5, 512, 4, 2, 128, true],
    [2, 79, 320, 4, 1, 80, false], // head size 80: partners in other lanes; the second row past max_ctx
    [1, 3, 512, 2, 2, 256, true],
    [4, 0, 96, 6, 3, 16, true],
  ] as const
).map(
  ([T, pos, C, nHead, nKv, maxCtx, norms]): KernelCase => ({
    kernel: "rope",
    shape: `T=${T} pos=${pos} C=${C} heads=${nHead}/${nKv} hs=${C / nHead}${norms ? " q/k norms" : ""}`,
    run: (pair, seed) => {
      const hs = C / nHead;
      return pair.compare(
        {
          qkv: randomFloats(T * (C + 2 * nKv * hs), seed + 90, 2),
          state: stateAt(pos),
          table: ropeTable(maxCtx, hs),
          qn: randomFloats(hs, seed + 91),
          kn: randomFloats(hs, seed + 92),
        },
        {},
        (b, p) =>
          b.ops.op_rope(
            p.qkv!,
            p.state!,
            p.table!,
            norms ? p.qn! : 0,
            norms ? p.kn! : 0,
            1,
            T,
            C,
            nHead,
            nKv,
            maxCtx,
            1e-6,
          ),
        ["qkv"],
      );
    },
  }),
);

const swigluCases = (
  [
    [1, 8192],
    [3, 1536],
    [2, 101],
  ] as const
).map(
  ([rows, I]): KernelCase => ({
    kernel: "swiglu",
    shape: `rows=${rows} I=${I}`,
    run: (pair, seed) =>
      pair.compare({ gu: randomFloats(rows * 2 * I, seed + 95, 4) }, { out: rows * I }, (b, p) =>
        b.ops.op_swiglu(p.out!, p.gu!, rows, I),
      ),
  }),
);

/** embed without a position table (rotary models): the token's row alone. */
const tokenEmbedCases = (
  [
    [1, 2048],
    [3, 130],
  ] as const
).map(
  ([T, C]): KernelCase => ({
    kernel: "embed",
    shape: `T=${T} C=${C} no positions`,
    run: (pair, seed) => {
      const V = 1003,
        maxCtx = 64;
      const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 7919 + seed) % V);
      return pair.compare({ seq, state: stateAt(5), wte: randomFloats(V * C, seed + 1) }, { out: T * C }, (b, p) =>
        b.ops.op_embed(p.out!, p.seq!, p.state!, p.wte!, 0, 1, T, C, maxCtx, F32),
      );
    },
  }),
);

// ---- the fused decode ops (one row) -------------------------------------------------------------------------
const EPS = 1e-5;
const layerNormInputs = (C: number, seed: number) => ({
  x: randomFloats(C, seed, 3),
  lnW: randomFloats(C, seed + 1),
  lnB: randomFloats(C, seed + 2),
});

/** qkv, and the caches (kv_C columns): row pos written (when below max_ctx), every other row as it was. */
const lnQkvCases = (
  [
    [768, 768, 5, 1024],
    [128, 128, 63, 64],
    [128, 128, 64, 64],
    [90, 90, 7, 16],
    [1600, 1600, 3, 16],
    [128, 64, 5, 64], // grouped-query: 4 heads of 32 sharing 2
    [768, 64, 9, 32], // multi-query: GPT-2 small's 12 heads sharing one
    [90, 45, 7, 16], // OC = 180 is a multiple of 4 and kv_C is not: the scalar variant
  ] as const
).map(
  ([C, kvC, pos, maxCtx]): KernelCase => ({
    kernel: "ln_qkv",
    shape: `C=${C} kv_C=${kvC} pos=${pos} max_ctx=${maxCtx}${kvC % 4 ? " (scalar)" : ""}`,
    run: (pair, seed) =>
      pair.compare(
        {
          ...layerNormInputs(C, seed + 40),
          w: randomMatrix(C, C + 2 * kvC, seed + 43),
          b: randomFloats(C + 2 * kvC, seed + 44),
          state: stateAt(pos),
          k: randomFloats(maxCtx * kvC, seed + 45),
          v: randomFloats(maxCtx * kvC, seed + 46),
        },
        { qkv: C + 2 * kvC },
        (b, p) =>
          b.ops.op_ln_qkv(
            p.qkv!,
            p.k!,
            p.v!,
            p.partials!,
            p.x!,
            p.lnW!,
            p.lnB!,
            p.w!,
            p.b!,
            p.state!,
            1,
            C,
            kvC,
            maxCtx,
            EPS,
            F32,
            F32,
          ),
        ["k", "v"],
      ),
  }),
);

const lnLinearGeluCases = (
  [
    [768, 3072],
    [128, 512],
    [90, 70],
    [1600, 6400],
  ] as const
).map(
  ([C, OC]): KernelCase => ({
    kernel: "ln_linear_gelu",
    shape: `C=${C} OC=${OC}`,
    run: (pair, seed) =>
      pair.compare(
        { ...layerNormInputs(C, seed + 50), w: randomMatrix(C, OC, seed + 53), b: randomFloats(OC, seed + 54) },
        { out: OC },
        (b, p) => b.ops.op_ln_linear_gelu(p.out!, p.partials!, p.x!, p.lnW!, p.lnB!, p.w!, p.b!, 1, C, OC, EPS, F32),
      ),
  }),
);

const linearResidualCases = (
  [
    [768, 768],
    [3072, 768],
    [96, 101],
    [6400, 1600],
  ] as const
).map(
  ([C, OC]): KernelCase => ({
    kernel: "linear_residual",
    shape: `C=${C} OC=${OC}`,
    run: (pair, seed) =>
      pair.compare(
        {
          x: randomFloats(OC, seed + 60),
          inp: randomFloats(C, seed + 61),
          w: randomMatrix(C, OC, seed + 62),
          b: randomFloats(OC, seed + 63),
        },
        {},
        (b, p) => b.ops.op_linear_residual(p.x!, p.partials!, p.inp!, p.w!, p.b!, 1, C, OC, F32),
        ["x"],
      ),
  }),
);

/**
 * The logits against the CPU's within tolerance; the token exactly the rule applied to the device's own logits
 * (a near-tie may break either way between two summation orders), written only below max_ctx; pos + 1.
 */
const lnLmHeadArgmaxCases = (
  [
    [768, 50257, 5, 1024],
    [128, 1001, 63, 64],
    [130, 999, 64, 64],
    [1600, 5003, 3, 16],
  ] as const
).map(
  ([C, V, pos, maxCtx]): KernelCase => ({
    kernel: "ln_lm_head_argmax",
    shape: `C=${C} V=${V} pos=${pos} max_ctx=${maxCtx}`,
    run: (pair, seed) => {
      const { x, lnW, lnB } = layerNormInputs(C, seed + 70);
      const wte = randomFloats(V * C, seed + 73, 0.1);
      const on = (arena: DeviceArena) => {
        const logits = arena.poisoned(V);
        const seq = arena.put(Int32Array.from({ length: maxCtx + 1 }, (_, i) => -1 - i)),
          state = arena.put(stateAt(pos));
        arena.backend.ops.op_ln_lm_head_argmax(
          logits.ptr,
          seq.ptr,
          state.ptr,
          pair.partials(arena),
          arena.put(x).ptr,
          arena.put(lnW).ptr,
          arena.put(lnB).ptr,
          arena.put(wte).ptr,
          1,
          C,
          V,
          maxCtx,
          EPS,
          F32,
        );
        return { logits: arena.floats(logits), seq: arena.ints(seq), pos: arena.ints(state)[0]! };
      };
      const got = on(pair.device),
        want = on(pair.cpu);
      pair.note("logits", got.logits);
      pair.note("seq", got.seq);
      const next =
        pos + 1 <= maxCtx ? got.seq[pos + 1] === expectedArgmax(got.logits) : got.seq.every((t, i) => t === -1 - i);
      return next && got.pos === pos + 1 && want.pos === pos + 1 ? maxRelativeError(got.logits, want.logits) : Infinity;
    },
  }),
);

export const KERNEL_CASES: KernelCase[] = [
  ...embedCases,
  ...layernormCases,
  ...linearCases,
  ...elementwiseCases,
  geluTail,
  residualInPlace,
  ...lmHeadCases,
  ...argmaxCases,
  ...ATTENTION_SHAPES.map(([T, pos, C, H, maxCtx]) => attentionCase(T, pos, C, H, maxCtx)),
  ...GQA_SHAPES.map(([T, pos, C, H, nKv, maxCtx]) => attentionCase(T, pos, C, H, maxCtx, nKv)),
  ...rmsnormCases,
  ...ropeCases,
  ...swigluCases,
  ...tokenEmbedCases,
  ...lnQkvCases,
  ...lnLinearGeluCases,
  ...linearResidualCases,
  ...lnLmHeadArgmaxCases,
  ...BATCH_DTYPE_CASES,
];

const sameBits = (a: Array<[string, Float32Array | Int32Array]>, b: Array<[string, Float32Array | Int32Array]>) =>
  a.length === b.length &&
  a.every(([name, x], i) => {
    const [otherName, y] = b[i]!;
    const xs = new Uint32Array(x.buffer, x.byteOffset, x.length),
      ys = new Uint32Array(y.buffer, y.byteOffset, y.length);
    return name === otherName && xs.length === ys.length && xs.every((w, k) => w === ys[k]);
  });

/**
 * Runs cases on `device` against `cpu`; the device's sticky error is checked after each. With `rerun`, each
 * case runs a second time after rerun() (the emulator switching to another schedule) and its device outputs
 * must repeat bit for bit.
 */
export function runKernelCases(
  device: Backend,
  cpu: Backend,
  seed: number,
  cases = KERNEL_CASES,
  rerun?: () => void,
): KernelRow[] {
  const once = (c: KernelCase) => {
    const pair = new Pair(device, cpu);
    try {
      const error = c.run(pair, seed);
      device.synchronize();
      return { error, outputs: pair.deviceOutputs };
    } finally {
      pair.release();
    }
  };
  return cases.map((c) => {
    const first = once(c);
    let repeatable: boolean | null = null;
    if (rerun) {
      rerun();
      repeatable = sameBits(first.outputs, once(c).outputs);
    }
    return {
      kernel: c.kernel,
      shape: c.shape,
      error: first.error,
      repeatable,
      ok: first.error <= KERNEL_TOLERANCE && repeatable !== false,
    };
  });
}
