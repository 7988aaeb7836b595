// Each CPU op (the CPU twins in cuda/*.cpp) against a float64 TypeScript reference on fresh random
// inputs, outputs poisoned with NaN first so that an unwritten element fails.
import { afterAll, describe, expect, test } from "bun:test";

import { CpuBackend } from "../src/backends/cpu.ts";
import { ensureBuilt } from "../src/native/build.ts";
import { DTYPES } from "../src/ops.ts";
import { DeviceArena, freshSeed } from "./helpers/device.ts";
import {
  argmaxRef, attentionRef, embedRef, geluRef, layernormRef, linearRef, lmHeadRef, maxRelativeError, randomFloats, residualRef,
} from "./helpers/reference.ts";

const TOLERANCE = 1e-4; // fp32, relative to the largest reference magnitude
const F32 = DTYPES.f32;
const backend = CpuBackend.open();
const arena = new DeviceArena(backend);
const seed = freshSeed();
const ops = backend.ops;
console.log(`cpu-ops: SEED=${seed}`);
afterAll(() => {
  arena.release();
  backend.close();
});

const state = (pos: number) => arena.put(Int32Array.of(pos, 0, 0, 0));

/** op_linear on fresh random inputs against the float64 reference. */
function checkLinear(b: CpuBackend, on: DeviceArena, T: number, C: number, OC: number): void {
  const inp = randomFloats(T * C, seed + 3 + T), w = randomFloats(C * OC, seed + 4 + C, 0.1), bias = randomFloats(OC, seed + 5 + OC);
  const out = on.poisoned(T * OC);
  b.ops.op_linear(out.ptr, 0, on.put(inp).ptr, on.put(w).ptr, on.put(bias).ptr, T, C, OC, F32);
  expect(maxRelativeError(on.floats(out), linearRef(inp, w, bias, T, C, OC))).toBeLessThan(TOLERANCE);
}

/** kv_append of T rows at pos, then op_attention, against the float64 reference (the appended rows checked on request). */
function checkAttention(b: CpuBackend, on: DeviceArena, T: number, pos: number, C: number, H: number, maxCtx: number, opts = { checkAppend: false }): void {
  const qkv = randomFloats(T * 3 * C, seed + 6 + pos + T, 2);
  const history = randomFloats(maxCtx * C * 2, seed + 7 + C);
  const k = on.put(history.subarray(0, maxCtx * C)), v = on.put(history.subarray(maxCtx * C));
  const st = on.put(Int32Array.of(pos, 0, 0, 0));
  b.ops.op_kv_append(k.ptr, v.ptr, on.put(qkv).ptr, st.ptr, 1, T, C, maxCtx, F32);
  const kHost = on.floats(k), vHost = on.floats(v);
  if (opts.checkAppend) {
    for (let t = 0; t < T; t++) {
      expect(Array.from(kHost.subarray((pos + t) * C, (pos + t + 1) * C))).toEqual(Array.from(qkv.subarray(t * 3 * C + C, t * 3 * C + 2 * C)));
      expect(Array.from(vHost.subarray((pos + t) * C, (pos + t + 1) * C))).toEqual(Array.from(qkv.subarray(t * 3 * C + 2 * C, t * 3 * C + 3 * C)));
    }
  }
  const out = on.poisoned(T * C);
  b.ops.op_attention(out.ptr, 0, on.put(qkv).ptr, k.ptr, v.ptr, st.ptr, 1, T, C, H, maxCtx, F32);
  expect(maxRelativeError(on.floats(out), attentionRef(qkv, 3 * C, kHost, vHost, pos, T, C, H))).toBeLessThan(TOLERANCE);
}

describe("the CPU library's thread pool", () => {
  test("every chunk of 5,000 back-to-back jobs of 1..64 uneven chunks runs exactly once before its job returns", () => {
    expect(backend.cpu.cpu_pool_check(5_000)).toBe(0);
  });

  test("the same with one thread (the caller alone) and after resizing back", () => {
    const threads = backend.threads;
    backend.cpu.cpu_set_threads(1);
    expect(backend.cpu.cpu_pool_check(500)).toBe(0);
    backend.cpu.cpu_set_threads(Math.max(2, threads));
    expect(backend.cpu.cpu_pool_check(500)).toBe(0);
    backend.cpu.cpu_set_threads(threads);
  });
});

describe("results do not depend on which thread ran which chunk", () => {
  test("linear (T = 1 and 64), attention (T = 1 at 1000 keys, T = 100) and the LM head: identical bits on 1 and 2 threads", () => {
    const C = 768, H = 12, maxCtx = 1024;
    const k = arena.put(randomFloats(maxCtx * C, seed + 20)), v = arena.put(randomFloats(maxCtx * C, seed + 21));
    const w = arena.put(randomFloats(C * 3 * C, seed + 22, 0.1)), bias = arena.put(randomFloats(3 * C, seed + 23));
    const inp = arena.put(randomFloats(100 * 3 * C, seed + 24));
    const runs: Array<[number, (out: number) => void]> = [
      [3 * C, (out) => ops.op_linear(out, 0, inp.ptr, w.ptr, bias.ptr, 1, C, 3 * C, F32)],
      [64 * 3 * C, (out) => ops.op_linear(out, 0, inp.ptr, w.ptr, bias.ptr, 64, C, 3 * C, F32)],
      [C, (out) => ops.op_attention(out, 0, inp.ptr, k.ptr, v.ptr, state(999).ptr, 1, 1, C, H, maxCtx, F32)],
      [100 * C, (out) => ops.op_attention(out, 0, inp.ptr, k.ptr, v.ptr, state(0).ptr, 1, 100, C, H, maxCtx, F32)],
      [3 * C, (out) => ops.op_lm_head(out, inp.ptr, w.ptr, 1, 1, C, 3 * C, F32)],
    ];
    const threads = backend.threads;
    const outputs = (n: number) => {
      backend.cpu.cpu_set_threads(n);
      return runs.map(([floats, run]) => {
        const out = arena.poisoned(floats);
        run(out.ptr);
        return arena.floats(out);
      });
    };
    const one = outputs(1), two = outputs(Math.max(2, threads));
    backend.cpu.cpu_set_threads(threads);
    one.forEach((o, i) => expect(Buffer.from(two[i]!.buffer).equals(Buffer.from(o.buffer))).toBe(true));
  });
});

describe("CPU ops vs TypeScript reference", () => {
  test.each([[1, 768], [5, 128], [3, 1600]])("layernorm T=%d C=%d", (T, C) => {
    const inp = randomFloats(T * C, seed + C, 3), w = randomFloats(C, seed + 1), b = randomFloats(C, seed + 2);
    const out = arena.poisoned(T * C);
    ops.op_layernorm(out.ptr, arena.put(inp).ptr, arena.put(w).ptr, arena.put(b).ptr, T, C, 1e-5);
    expect(maxRelativeError(arena.floats(out), layernormRef(inp, w, b, T, C, 1e-5))).toBeLessThan(TOLERANCE);
  });

  test.each([[1, 768, 2304], [1, 3072, 768], [9, 128, 384], [17, 96, 100], [4, 64, 257]])("linear T=%d C=%d OC=%d", (T, C, OC) => {
    checkLinear(backend, arena, T, C, OC);
  });

  test.each([[1, 0], [1, 700], [6, 10], [4, 1019]])("kv_append + attention T=%d pos=%d (C=768, 12 heads, max_ctx=1024)", (T, pos) => {
    checkAttention(backend, arena, T, pos, 768, 12, 1024, { checkAppend: true });
  });

  test("embed at a position offset", () => {
    const T = 3, C = 64, V = 50, pos = 7;
    const wte = randomFloats(V * C, seed + 8), wpe = randomFloats(16 * C, seed + 9);
    const seq = Int32Array.from({ length: 17 }, (_, i) => (i * 7 + seed) % V);
    const out = arena.poisoned(T * C);
    ops.op_embed(out.ptr, arena.put(seq).ptr, state(pos).ptr, arena.put(wte).ptr, arena.put(wpe).ptr, 1, T, C, 16, F32);
    expect(maxRelativeError(arena.floats(out), embedRef(seq, pos, wte, wpe, T, C))).toBeLessThan(TOLERANCE);
  });

  test.each([1, 1000, 100_003])("gelu and residual N=%d", (N) => {
    const a = randomFloats(N, seed + 10, 4), b = randomFloats(N, seed + 11);
    const out = arena.poisoned(N);
    ops.op_gelu(out.ptr, arena.put(a).ptr, N);
    expect(maxRelativeError(arena.floats(out), geluRef(a))).toBeLessThan(TOLERANCE);
    const sum = arena.poisoned(N);
    ops.op_residual(sum.ptr, arena.put(a).ptr, arena.put(b).ptr, N);
    expect(maxRelativeError(arena.floats(sum), residualRef(a, b))).toBeLessThan(TOLERANCE);
  });

  test.each([[1, 768, 50257], [3, 128, 1001]])("lm_head on the last row T=%d C=%d V=%d, then argmax", (T, C, V) => {
    const inp = randomFloats(T * C, seed + 12), wte = randomFloats(V * C, seed + 13, 0.1);
    const logits = arena.poisoned(V);
    ops.op_lm_head(logits.ptr, arena.put(inp).ptr, arena.put(wte).ptr, 1, T, C, V, F32);
    const got = arena.floats(logits);
    expect(maxRelativeError(got, lmHeadRef(inp, wte, T, C, V))).toBeLessThan(TOLERANCE);

    const maxCtx = 64, pos = 10;
    const seq = arena.put(new Int32Array(maxCtx + 1).fill(-1));
    const st = state(pos);
    ops.op_argmax(seq.ptr, st.ptr, 0, logits.ptr, 1, V, T, maxCtx);
    expect(arena.ints(seq)[pos + T]).toBe(argmaxRef(got));
    expect(arena.ints(st)[0]).toBe(pos + T);
  });

  test("argmax: lowest index wins a tie; nothing written past max_ctx", () => {
    const logits = arena.put(Float32Array.of(1, 5, 3, 5, 2));
    const seq = arena.put(new Int32Array(9).fill(-1));
    const st = state(2);
    ops.op_argmax(seq.ptr, st.ptr, 0, logits.ptr, 1, 5, 1, 8);
    expect(arena.ints(seq)[3]).toBe(1);
    const full = state(8);
    ops.op_argmax(seq.ptr, full.ptr, 0, logits.ptr, 1, 5, 1, 8);
    expect(Array.from(arena.ints(seq)).filter((x) => x !== -1)).toEqual([1]);
    expect(arena.ints(full)[0]).toBe(9);
  });
});

// The paths that split work across threads and the micro-kernel's tiles (cuda/cpu_math.h: 6 rows × 64
// columns with AVX-512, 6 × 16 with AVX2, 4 × 8 without AVX), on the library as built here (-march=native)
// and built without AVX-512 and without AVX, so that every tile shape is checked on this machine.
const VARIANTS: Array<[string, string[]]> = [["native", []], ["no-avx512", ["-mno-avx512f"]], ["no-avx", ["-mno-avx"]]];

describe.each(VARIANTS)("CPU library %s: threaded paths and micro-kernel edges", (variant, flags) => {
  const lib = flags.length ? CpuBackend.openPath(ensureBuilt("cpu", { extraFlags: flags, variant, quiet: true }).path) : backend;
  const on = new DeviceArena(lib);
  afterAll(() => {
    on.release();
    if (lib !== backend) lib.close();
  });

  // T = 1..8: bands of weight rows, partials summed in order (threaded from 2^18 multiply-adds on);
  // T >= 9: column panels through the micro-kernel; OC not a multiple of the tile width, C past one depth block (256)
  test.each([
    [1, 300, 200], [2, 768, 768], [3, 7, 65], [5, 513, 129], [7, 257, 1000], [8, 1, 33],
    [9, 600, 65], [9, 3, 5], [10, 257, 129], [12, 256, 64], [13, 513, 200], [31, 100, 17], [64, 768, 2304],
  ])("linear T=%d C=%d OC=%d", (T, C, OC) => checkLinear(lib, on, T, C, OC));

  // T = 1: key ranges of 32 (one range, a boundary, many ranges split across threads), merged in order
  // T > 1: query blocks of 8 micro-tile rows × key blocks of 64; heads of 64, 40 and 48 channels
  test.each([
    [1, 0, 768, 12], [1, 31, 768, 12], [1, 32, 768, 12], [1, 1000, 768, 12], [1, 700, 200, 5],
    [2, 0, 768, 12], [5, 61, 768, 12], [9, 100, 192, 3], [47, 0, 768, 12], [48, 0, 200, 5], [49, 16, 96, 2],
    [100, 0, 768, 12], [60, 70, 768, 12], [130, 3, 200, 5],
  ])("attention T=%d pos=%d C=%d heads=%d (max_ctx 1024)", (T, pos, C, H) => checkAttention(lib, on, T, pos, C, H, 1024));
});
