// Each CPU op (the CPU twins in cuda/*.cpp) against a float64 TypeScript reference on fresh random
// inputs, outputs poisoned with NaN first so that an unwritten element fails.
import { afterAll, describe, expect, test } from "bun:test";

import { CpuBackend } from "../src/backends/cpu.ts";
import { DeviceArena, freshSeed } from "./helpers/device.ts";
import {
  argmaxRef, attentionRef, embedRef, geluRef, layernormRef, linearRef, lmHeadRef, maxRelativeError, randomFloats, residualRef,
} from "./helpers/reference.ts";

const TOLERANCE = 1e-4; // fp32, relative to the largest reference magnitude
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

describe("CPU ops vs TypeScript reference", () => {
  test.each([[1, 768], [5, 128], [3, 1600]])("layernorm T=%d C=%d", (T, C) => {
    const inp = randomFloats(T * C, seed + C, 3), w = randomFloats(C, seed + 1), b = randomFloats(C, seed + 2);
    const out = arena.poisoned(T * C);
    ops.op_layernorm(out.ptr, arena.put(inp).ptr, arena.put(w).ptr, arena.put(b).ptr, T, C, 1e-5);
    expect(maxRelativeError(arena.floats(out), layernormRef(inp, w, b, T, C, 1e-5))).toBeLessThan(TOLERANCE);
  });

  test.each([[1, 768, 2304], [1, 3072, 768], [9, 128, 384], [17, 96, 100], [4, 64, 257]])("linear T=%d C=%d OC=%d", (T, C, OC) => {
    const inp = randomFloats(T * C, seed + 3), w = randomFloats(C * OC, seed + 4, 0.1), b = randomFloats(OC, seed + 5);
    const out = arena.poisoned(T * OC);
    ops.op_linear(out.ptr, 0, arena.put(inp).ptr, arena.put(w).ptr, arena.put(b).ptr, T, C, OC);
    expect(maxRelativeError(arena.floats(out), linearRef(inp, w, b, T, C, OC))).toBeLessThan(TOLERANCE);
  });

  test.each([[1, 0], [1, 700], [6, 10], [4, 1019]])("kv_append + attention T=%d pos=%d (C=768, 12 heads, max_ctx=1024)", (T, pos) => {
    const C = 768, H = 12, maxCtx = 1024;
    const qkv = randomFloats(T * 3 * C, seed + 6 + pos, 2);
    const history = randomFloats(maxCtx * C * 2, seed + 7);
    const k = arena.put(history.subarray(0, maxCtx * C)), v = arena.put(history.subarray(maxCtx * C));
    const st = state(pos);
    ops.op_kv_append(k.ptr, v.ptr, arena.put(qkv).ptr, st.ptr, T, C, maxCtx);
    const kHost = arena.floats(k), vHost = arena.floats(v);
    for (let t = 0; t < T; t++) {
      expect(Array.from(kHost.subarray((pos + t) * C, (pos + t + 1) * C))).toEqual(Array.from(qkv.subarray(t * 3 * C + C, t * 3 * C + 2 * C)));
      expect(Array.from(vHost.subarray((pos + t) * C, (pos + t + 1) * C))).toEqual(Array.from(qkv.subarray(t * 3 * C + 2 * C, t * 3 * C + 3 * C)));
    }
    const out = arena.poisoned(T * C);
    ops.op_attention(out.ptr, 0, arena.put(qkv).ptr, k.ptr, v.ptr, st.ptr, T, C, H, maxCtx);
    expect(maxRelativeError(arena.floats(out), attentionRef(qkv, 3 * C, kHost, vHost, pos, T, C, H))).toBeLessThan(TOLERANCE);
  });

  test("embed at a position offset", () => {
    const T = 3, C = 64, V = 50, pos = 7;
    const wte = randomFloats(V * C, seed + 8), wpe = randomFloats(16 * C, seed + 9);
    const seq = Int32Array.from({ length: 17 }, (_, i) => (i * 7 + seed) % V);
    const out = arena.poisoned(T * C);
    ops.op_embed(out.ptr, arena.put(seq).ptr, state(pos).ptr, arena.put(wte).ptr, arena.put(wpe).ptr, T, C);
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
    ops.op_lm_head(logits.ptr, arena.put(inp).ptr, arena.put(wte).ptr, T, C, V);
    const got = arena.floats(logits);
    expect(maxRelativeError(got, lmHeadRef(inp, wte, T, C, V))).toBeLessThan(TOLERANCE);

    const maxCtx = 64, pos = 10;
    const seq = arena.put(new Int32Array(maxCtx + 1).fill(-1));
    const st = state(pos);
    ops.op_argmax(seq.ptr, st.ptr, 0, logits.ptr, V, T, maxCtx);
    expect(arena.ints(seq)[pos + T]).toBe(argmaxRef(got));
    expect(arena.ints(st)[0]).toBe(pos + T);
  });

  test("argmax: lowest index wins a tie; nothing written past max_ctx", () => {
    const logits = arena.put(Float32Array.of(1, 5, 3, 5, 2));
    const seq = arena.put(new Int32Array(9).fill(-1));
    const st = state(2);
    ops.op_argmax(seq.ptr, st.ptr, 0, logits.ptr, 5, 1, 8);
    expect(arena.ints(seq)[3]).toBe(1);
    const full = state(8);
    ops.op_argmax(seq.ptr, full.ptr, 0, logits.ptr, 5, 1, 8);
    expect(Array.from(arena.ints(seq)).filter((x) => x !== -1)).toEqual([1]);
    expect(arena.ints(full)[0]).toBe(9);
  });
});
