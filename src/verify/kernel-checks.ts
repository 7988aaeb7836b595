// Every op of a device backend (the CUDA kernels, or their sources emulated on the CPU) against its CPU
// twin, on fresh random inputs, with outputs poisoned (NaN) first so that an unwritten element fails.
// Tolerance: max |device − cpu| / max |cpu| over each output ≤ 1e-4; argmax's seq and state exactly.
import type { Backend } from "../backends/backend.ts";
import { DeviceArena } from "./arena.ts";
import { maxRelativeError, randomFloats } from "./compare.ts";

export const KERNEL_TOLERANCE = 1e-4;

export interface KernelRow {
  kernel: string;
  shape: string;
  /** the largest relative error over the case's outputs */
  error: number;
  ok: boolean;
}

type Input = Float32Array | Int32Array;
type Pointers = Record<string, number>;

/** The same op on two backends: inputs uploaded, outputs (name → words) poisoned, results downloaded. */
class Pair {
  readonly device: DeviceArena;
  readonly cpu: DeviceArena;
  constructor(device: Backend, cpu: Backend) {
    this.device = new DeviceArena(device);
    this.cpu = new DeviceArena(cpu);
  }

  private runOn(arena: DeviceArena, inputs: Record<string, Input>, outputs: Record<string, number>, run: (b: Backend, p: Pointers) => void) {
    const p: Pointers = {};
    for (const [name, data] of Object.entries(inputs)) p[name] = arena.put(data).ptr;
    const out = Object.fromEntries(Object.entries(outputs).map(([name, words]) => [name, arena.poisoned(words)]));
    for (const [name, b] of Object.entries(out)) p[name] = b.ptr;
    run(arena.backend, p);
    return Object.fromEntries(Object.entries(out).map(([name, b]) => [name, arena.floats(b)]));
  }

  /** max relative error of the device's outputs against the CPU's */
  compare(inputs: Record<string, Input>, outputs: Record<string, number>, run: (b: Backend, p: Pointers) => void): number {
    const got = this.runOn(this.device, inputs, outputs, run);
    const want = this.runOn(this.cpu, inputs, outputs, run);
    return Math.max(...Object.keys(outputs).map((name) => maxRelativeError(got[name]!, want[name]!)));
  }

  release(): void {
    this.device.release();
    this.cpu.release();
  }
}

const stateAt = (pos: number) => Int32Array.of(pos, 0, 0, 0);

export interface KernelCase {
  kernel: string;
  shape: string;
  run(pair: Pair, seed: number): number;
}

const embedCases = ([[1, 768], [4, 128], [3, 1600], [2, 130]] as const).map(([T, C]): KernelCase => ({
  kernel: "embed", shape: `T=${T} C=${C}`,
  run: (pair, seed) => {
    const V = 1001, maxCtx = 64, pos = 9;
    const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 7919 + seed) % V);
    return pair.compare({ seq, state: stateAt(pos), wte: randomFloats(V * C, seed + 1), wpe: randomFloats(maxCtx * C, seed + 2) }, { out: T * C },
      (b, p) => b.ops.op_embed(p.out!, p.seq!, p.state!, p.wte!, p.wpe!, T, C));
  },
}));

const layernormCases = ([[1, 768], [7, 128], [2, 1600], [3, 100]] as const).map(([T, C]): KernelCase => ({
  kernel: "layernorm", shape: `T=${T} C=${C}`,
  run: (pair, seed) => pair.compare({ inp: randomFloats(T * C, seed + C, 3), w: randomFloats(C, seed + 3), b: randomFloats(C, seed + 4) }, { out: T * C },
    (b, p) => b.ops.op_layernorm(p.out!, p.inp!, p.w!, p.b!, T, C, 1e-5)),
}));

const LINEAR_SHAPES = [
  [1, 768, 2304], [1, 768, 768], [1, 768, 3072], [1, 3072, 768], [1, 1600, 6400], [1, 6400, 1600], [1, 128, 384],
  [1, 96, 101], // OC % 4 != 0: the scalar matvec
  [5, 768, 2304], [64, 128, 512], [33, 100, 70], [2, 3072, 768],
] as const;
const linearCases = LINEAR_SHAPES.map(([T, C, OC]): KernelCase => ({
  kernel: "linear", shape: `T=${T} C=${C} OC=${OC}`,
  run: (pair, seed) => pair.compare({ inp: randomFloats(T * C, seed + 5), w: randomFloats(C * OC, seed + 6, 0.1), b: randomFloats(OC, seed + 7) }, { out: T * OC },
    (b, p) => b.ops.op_linear(p.out!, p.inp!, p.w!, p.b!, T, C, OC)),
}));

const elementwiseCases = [1, 1000, 100_003, 768 * 4 * 5].flatMap((N): KernelCase[] => [
  { kernel: "gelu", shape: `N=${N}`, run: (pair, seed) => pair.compare({ a: randomFloats(N, seed + 8, 4) }, { out: N }, (b, p) => b.ops.op_gelu(p.out!, p.a!, N)) },
  {
    kernel: "residual", shape: `N=${N}`,
    run: (pair, seed) => pair.compare({ a: randomFloats(N, seed + 9), b: randomFloats(N, seed + 10) }, { out: N }, (b, p) => b.ops.op_residual(p.out!, p.a!, p.b!, N)),
  },
]);

/** GELU's negative tail one element at a time, where 0.5 x (1 + tanh u) cancels: each error is relative to that element. */
const geluTail: KernelCase = {
  kernel: "gelu", shape: "N=1 at each x in -10..-2 (the negative tail)",
  run: (pair) => Math.max(...Array.from({ length: 81 }, (_, i) => pair.compare({ a: Float32Array.of(-10 + i / 10) }, { out: 1 }, (b, p) => b.ops.op_gelu(p.out!, p.a!, 1)))),
};

const residualInPlace: KernelCase = {
  kernel: "residual", shape: "N=4099, out aliases a",
  run: (pair, seed) => {
    const N = 4099;
    const a = randomFloats(N, seed + 11), bIn = randomFloats(N, seed + 12);
    const on = (arena: DeviceArena) => {
      const pa = arena.put(a);
      arena.backend.ops.op_residual(pa.ptr, pa.ptr, arena.put(bIn).ptr, N);
      return arena.floats(pa);
    };
    return maxRelativeError(on(pair.device), on(pair.cpu));
  },
};

const lmHeadCases = ([[1, 768, 50257], [3, 128, 1001], [1, 1600, 5003], [2, 130, 999]] as const).map(([T, C, V]): KernelCase => ({
  kernel: "lm_head", shape: `T=${T} C=${C} V=${V}`,
  run: (pair, seed) => pair.compare({ inp: randomFloats(T * C, seed + 13), wte: randomFloats(V * C, seed + 14, 0.1) }, { logits: V },
    (b, p) => b.ops.op_lm_head(p.logits!, p.inp!, p.wte!, T, C, V)),
}));

/** argmax with a tie at the maximum (the lower index must win): seq and state must match exactly (error 0 or ∞). */
const argmaxCases = ([[50257, 1, 5, 1024], [1001, 1, 63, 64], [1001, 1, 64, 64], [999, 4, 60, 64], [3, 2, 10, 64]] as const).map(
  ([V, T, pos, maxCtx]): KernelCase => ({
    kernel: "argmax", shape: `V=${V} T=${T} pos=${pos} max_ctx=${maxCtx}`,
    run: (pair, seed) => {
      const logits = randomFloats(V, seed + 15 + pos);
      const top = logits.reduce((m, x) => Math.max(m, x), -Infinity) + 1;
      logits[Math.floor(V / 2)] = top;
      logits[V - 1] = top;
      const on = (arena: DeviceArena) => {
        const seq = arena.put(Int32Array.from({ length: maxCtx + 1 }, (_, i) => -1 - i));
        const state = arena.put(stateAt(pos));
        arena.backend.ops.op_argmax(seq.ptr, state.ptr, arena.put(logits).ptr, V, T, maxCtx);
        return [...arena.ints(seq), ...arena.ints(state)];
      };
      const got = on(pair.device), want = on(pair.cpu);
      const expectedNext = pos + T <= maxCtx ? want[pos + T] === Math.floor(V / 2) : true;
      return got.every((x, i) => x === want[i]) && want[maxCtx + 1] === pos + T && expectedNext ? 0 : Infinity;
    },
  }));

/** kv_append then attention for T new rows at pos: the cache rows exactly, the output within tolerance. */
export function attentionCase(T: number, pos: number, C: number, nHead: number, maxCtx: number): KernelCase {
  return {
    kernel: "kv_append+attention", shape: `T=${T} pos=${pos} C=${C} heads=${nHead} max_ctx=${maxCtx}`,
    run: (pair, seed) => {
      const qkv = randomFloats(T * 3 * C, seed + 20 + pos, 2);
      const k = randomFloats(maxCtx * C, seed + 21), v = randomFloats(maxCtx * C, seed + 22);
      const on = (arena: DeviceArena) => {
        const b = arena.backend;
        const pk = arena.put(k), pv = arena.put(v), pq = arena.put(qkv), st = arena.put(stateAt(pos));
        const scratchBytes = b.attentionScratchBytes(T, C, nHead, maxCtx);
        const scratch = scratchBytes > 0 ? arena.zeroed(scratchBytes / 4).ptr : 0;
        const out = arena.poisoned(T * C);
        b.ops.op_kv_append(pk.ptr, pv.ptr, pq.ptr, st.ptr, T, C, maxCtx);
        b.ops.op_attention(out.ptr, scratch, pq.ptr, pk.ptr, pv.ptr, st.ptr, T, C, nHead, maxCtx);
        return { out: arena.floats(out), k: arena.floats(pk), v: arena.floats(pv) };
      };
      const got = on(pair.device), want = on(pair.cpu);
      const cacheExact = maxRelativeError(got.k, want.k) === 0 && maxRelativeError(got.v, want.v) === 0;
      return cacheExact ? maxRelativeError(got.out, want.out) : Infinity;
    },
  };
}

const ATTENTION_SHAPES = [
  [1, 0, 768, 12, 1024], [1, 63, 768, 12, 1024], [1, 64, 768, 12, 1024], [1, 700, 768, 12, 1024], [1, 1023, 768, 12, 1024],
  [4, 1020, 768, 12, 1024], [6, 10, 768, 12, 1024], [3, 61, 128, 2, 64], [5, 0, 128, 2, 64], [1, 200, 1600, 25, 256],
  [2, 30, 96, 3, 40], // head size 32, a partial last chunk
  [1, 100, 1024, 8, 128], // head size 128
  [2, 20, 90, 3, 64], // head size 30: scalar key reads
] as const;

export const KERNEL_CASES: KernelCase[] = [
  ...embedCases, ...layernormCases, ...linearCases, ...elementwiseCases, geluTail, residualInPlace, ...lmHeadCases, ...argmaxCases,
  ...ATTENTION_SHAPES.map(([T, pos, C, H, maxCtx]) => attentionCase(T, pos, C, H, maxCtx)),
];

/** Runs cases on `device` against `cpu`; the device's sticky error is checked after each. */
export function runKernelCases(device: Backend, cpu: Backend, seed: number, cases = KERNEL_CASES): KernelRow[] {
  return cases.map((c) => {
    const pair = new Pair(device, cpu);
    try {
      const error = c.run(pair, seed);
      device.synchronize();
      return { kernel: c.kernel, shape: c.shape, error, ok: error <= KERNEL_TOLERANCE };
    } finally {
      pair.release();
    }
  });
}
