// Each CPU op (the CPU twins in cuda/*.cpp) against a float64 TypeScript reference on fresh random
// inputs, outputs poisoned with NaN first so that an unwritten element fails; in every storage type (weights
// and KV cache in fp32, bf16, f16: the reference runs on the same rounded values), and batches against their
// sequences run one at a time, bit for bit.
import { afterAll, describe, expect, test } from "bun:test";

import type { DeviceBuffer } from "../src/backends/backend.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import { bf16Bits, bf16Value, roundInPlace, StorageConverter } from "../src/model/dtypes.ts";
import { ensureBuilt } from "../src/native/build.ts";
import { DTYPE_BYTES, DTYPES, MAX_BATCH, STATE_INTS, type DtypeName } from "../src/ops.ts";
import { DeviceArena, freshSeed } from "./helpers/device.ts";
import {
  argmaxRef,
  attentionRef,
  embedRef,
  geluRef,
  layernormRef,
  linearRef,
  lmHeadRef,
  maxRelativeError,
  randomFloats,
  residualRef,
} from "./helpers/reference.ts";

const TOLERANCE = 1e-4; // fp32 sums (of fp32, bf16 or f16 values), relative to the largest reference magnitude
const F32 = DTYPES.f32;
const NARROW: DtypeName[] = ["bf16", "f16"];
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

/** `values` as a storage type holds them, in whole 32-bit words (what a buffer of that type is uploaded from). */
function storedWords(dtype: DtypeName, values: Float32Array): Float32Array | Int32Array {
  if (dtype === "f32") return values;
  const stored = new StorageConverter(dtype).convert(values, () => "test input");
  const words = new Int32Array(Math.ceil(stored.byteLength / 4));
  new Uint8Array(words.buffer).set(new Uint8Array(stored.buffer, stored.byteOffset, stored.byteLength));
  return words;
}

/** A linear layer's (rows = in, cols = out) weight in a storage type, placed in the CPU library's layout of it. */
const putMatrix = (on: DeviceArena, dtype: DtypeName, values: Float32Array, rows: number, cols: number) =>
  on.putMatrix(
    new StorageConverter(dtype).convert(values, () => "test input"),
    rows,
    cols,
  );

/** The values a storage type holds for `values` (the reference's view of a stored weight). */
const rounded = (dtype: DtypeName, values: Float32Array) => roundInPlace(dtype, values.slice());

/** The first n elements of a buffer of a storage type, widened. */
function readStored(on: DeviceArena, dtype: DtypeName, buffer: DeviceBuffer, n: number): Float32Array {
  const words = on.ints(buffer);
  if (dtype === "f32") return new Float32Array(words.buffer, 0, n);
  if (dtype === "f16") return Float32Array.from(new Float16Array(words.buffer, 0, n));
  return Float32Array.from(new Uint16Array(words.buffer, 0, n), bf16Value);
}

/** op_linear on fresh random inputs against the float64 reference on the weights as stored. */
function checkLinear(b: CpuBackend, on: DeviceArena, T: number, C: number, OC: number, dtype: DtypeName = "f32"): void {
  const inp = randomFloats(T * C, seed + 3 + T),
    w = randomFloats(C * OC, seed + 4 + C, 0.1),
    bias = randomFloats(OC, seed + 5 + OC);
  const out = on.poisoned(T * OC);
  b.ops.op_linear(
    out.ptr,
    0,
    on.put(inp).ptr,
    putMatrix(on, dtype, w, C, OC).ptr,
    on.put(bias).ptr,
    T,
    C,
    OC,
    DTYPES[dtype],
  );
  expect(maxRelativeError(on.floats(out), linearRef(inp, rounded(dtype, w), bias, T, C, OC))).toBeLessThan(TOLERANCE);
}

/**
 * kv_append of T rows at pos into a cache of a storage type, then op_attention with nKv K/V heads (nHead by default),
 * against the float64 reference on the cache as stored (the appended rows checked on request: qkv's k and v rounded
 * as src/model/dtypes.ts does).
 */
function checkAttention(
  b: CpuBackend,
  on: DeviceArena,
  T: number,
  pos: number,
  C: number,
  H: number,
  maxCtx: number,
  opts: { checkAppend?: boolean; dtype?: DtypeName; nKv?: number } = {},
): void {
  const dtype = opts.dtype ?? "f32",
    nKv = opts.nKv ?? H;
  const kvC = (nKv * C) / H,
    row = C + 2 * kvC; // a qkv row: [q (C) | k (kv_C) | v (kv_C)]
  const qkv = randomFloats(T * row, seed + 6 + pos + T, 2);
  const history = randomFloats(maxCtx * kvC * 2, seed + 7 + C);
  const k = on.put(storedWords(dtype, history.subarray(0, maxCtx * kvC))),
    v = on.put(storedWords(dtype, history.subarray(maxCtx * kvC)));
  const st = on.put(Int32Array.of(pos, 0, 0, 0));
  b.ops.op_kv_append(k.ptr, v.ptr, on.put(qkv).ptr, st.ptr, 1, T, C, kvC, maxCtx, DTYPES[dtype]);
  const kHost = readStored(on, dtype, k, maxCtx * kvC),
    vHost = readStored(on, dtype, v, maxCtx * kvC);
  if (opts.checkAppend) {
    for (let t = 0; t < T; t++) {
      const cacheRow = (cache: Float32Array) => Array.from(cache.subarray((pos + t) * kvC, (pos + t + 1) * kvC));
      const part = (from: number) => Array.from(rounded(dtype, qkv.subarray(t * row + from, t * row + from + kvC)));
      expect(cacheRow(kHost)).toEqual(part(C));
      expect(cacheRow(vHost)).toEqual(part(C + kvC));
    }
  }
  const out = on.poisoned(T * C);
  b.ops.op_attention(out.ptr, 0, on.put(qkv).ptr, k.ptr, v.ptr, st.ptr, 1, T, C, H, nKv, maxCtx, DTYPES[dtype]);
  expect(maxRelativeError(on.floats(out), attentionRef(qkv, row, kHost, vHost, pos, T, C, H, nKv))).toBeLessThan(
    TOLERANCE,
  );
}

/**
 * op_ln_qkv for B = 3 sequences at positions 5, 0 and 63 with kv_C k and v columns (C = 192), weights and caches in a
 * storage type: qkv [q (C) | k (kv_C) | v (kv_C)] against the float64 reference (layernorm, then linear) on the
 * weights as stored; the caches start poisoned, and only row pos_b of sequence b's is written: its k (v) columns as
 * the op computed them, rounded to the cache's type.
 */
function checkLnQkv(dtype: DtypeName, kvC: number): void {
  const B = 3,
    C = 192,
    OC = C + 2 * kvC,
    maxCtx = 64,
    eps = 1e-5,
    positions = [5, 0, 63];
  const x = randomFloats(B * C, seed + 40, 2),
    lnW = randomFloats(C, seed + 41),
    lnB = randomFloats(C, seed + 42),
    w = randomFloats(C * OC, seed + 43, 0.1),
    bias = randomFloats(OC, seed + 44);
  const UNWRITTEN = 0x7fc07fc0; // NaN as a word, and as each of its halves in bf16 and f16
  const cache = () => arena.put(new Int32Array((B * maxCtx * kvC * DTYPE_BYTES[dtype]) / 4).fill(UNWRITTEN));
  const qkv = arena.poisoned(B * OC),
    k = cache(),
    v = cache();
  const states = Int32Array.from({ length: B * STATE_INTS }, (_, i) =>
    i % STATE_INTS === 0 ? positions[i / STATE_INTS]! : 0,
  );
  ops.op_ln_qkv(
    qkv.ptr,
    k.ptr,
    v.ptr,
    0,
    arena.put(x).ptr,
    arena.put(lnW).ptr,
    arena.put(lnB).ptr,
    putMatrix(arena, dtype, w, C, OC).ptr,
    arena.put(bias).ptr,
    arena.put(states).ptr,
    B,
    C,
    kvC,
    maxCtx,
    eps,
    DTYPES[dtype],
    DTYPES[dtype],
  );
  const got = arena.floats(qkv);
  const want = linearRef(layernormRef(x, lnW, lnB, B, C, eps), rounded(dtype, w), bias, B, C, OC);
  expect(maxRelativeError(got, want)).toBeLessThan(TOLERANCE);
  [k, v].forEach((buffer, part) => {
    const rows = new Float32Array(B * maxCtx * kvC).fill(NaN);
    positions.forEach((pos, b) => {
      const from = b * OC + C + part * kvC;
      rows.set(rounded(dtype, got.subarray(from, from + kvC)), (b * maxCtx + pos) * kvC);
    });
    expect([part ? "v" : "k", Array.from(readStored(arena, dtype, buffer, B * maxCtx * kvC))]).toEqual([
      part ? "v" : "k",
      Array.from(rows),
    ]);
  });
}

/** One buffer of a batch comparison: its initial words and the bytes of each sequence's part (0: shared by all). */
interface BatchBuffer {
  init: Float32Array | Int32Array;
  perSequence: number;
}

/** Index of the first 32-bit word where a and b differ, or -1. */
function firstDifference(a: Int32Array, b: Int32Array): number {
  if (a.length !== b.length) return 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/**
 * `call` once for B sequences on one copy of the buffers, and B times for one sequence (pointers moved to
 * sequence b's part) on another: every buffer must end with the same bits (cuda/ops.h: each row computed as it
 * would be alone).
 */
function expectBatchEqualsSingles(
  lib: CpuBackend,
  on: DeviceArena,
  B: number,
  buffers: Record<string, BatchBuffer>,
  call: (p: Record<string, number>, sequences: number) => void,
): void {
  const copy = () => Object.fromEntries(Object.entries(buffers).map(([name, b]) => [name, on.put(b.init)]));
  const batched = copy(),
    singles = copy();
  call(Object.fromEntries(Object.entries(batched).map(([name, b]) => [name, b.ptr])), B);
  for (let s = 0; s < B; s++) {
    call(
      Object.fromEntries(Object.entries(singles).map(([name, b]) => [name, b.ptr + s * buffers[name]!.perSequence])),
      1,
    );
  }
  lib.synchronize();
  for (const name of Object.keys(buffers)) {
    expect({
      buffer: name,
      firstDifference: firstDifference(on.ints(batched[name]!), on.ints(singles[name]!)),
    }).toEqual({ buffer: name, firstDifference: -1 });
  }
}

// e^x is computed a vector at a time in the loops' bodies and a float at a time in their tails (fewer than a
// vector's 4, 8 or 16 lanes): an element must get the same bits wherever it falls, or a batch's GELU rows would
// differ from the same rows alone. Each element is taken alone (a tail of one) and in windows of 15 that put it in
// a tail or a lane, beside the whole array; the fixed values reach e^x's clamps (±88) and its zero below -87.7.
function checkLanesEqualTails(lib: CpuBackend, on: DeviceArena): void {
  const window = 15;
  const bits = (x: Float32Array) => Array.from(new Int32Array(x.buffer, x.byteOffset, x.length));
  const withEdges = (edges: number[], n: number, seedOffset: number) => {
    const values = randomFloats(n, seed + seedOffset, 8);
    values.set(edges);
    return values;
  };
  const expectSameBits = (op: (x: Float32Array, y: Float32Array) => Float32Array, x: Float32Array, y: Float32Array) => {
    const whole = bits(op(x, y));
    for (let i = 0; i < x.length; i++) expect(bits(op(x.slice(i, i + 1), y.slice(i, i + 1)))).toEqual([whole[i]!]);
    for (let first = 0; first + window <= x.length && first < 64; first++)
      expect(bits(op(x.slice(first, first + window), y.slice(first, first + window)))).toEqual(
        whole.slice(first, first + window),
      );
  };

  const a = withEdges([-0, 1e4, -1e4, -5, -10, -10.5, -12, -44, 44, 87.7, -87.7, 88, -88, 100, -100], 203, 40);
  const gelu = (x: Float32Array) => {
    const out = on.poisoned(x.length);
    lib.ops.op_gelu(out.ptr, on.put(x).ptr, x.length);
    return on.floats(out);
  };
  expect(maxRelativeError(gelu(a), geluRef(a))).toBeLessThan(TOLERANCE);
  expectSameBits(gelu, a, a);

  const gate = withEdges([-0, 1e4, -1e4, 87.7, -87.7, 88, -88, 89, -89, 100, -100], 101, 41),
    up = randomFloats(gate.length, seed + 42);
  const swiglu = (g: Float32Array, u: Float32Array) => {
    const out = on.poisoned(g.length);
    const gateUp = new Float32Array(2 * g.length);
    gateUp.set(g);
    gateUp.set(u, g.length);
    lib.ops.op_swiglu(out.ptr, on.put(gateUp).ptr, 1, g.length);
    return on.floats(out);
  };
  const silu = Float64Array.from(gate, (g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
  expect(maxRelativeError(swiglu(gate, up), silu)).toBeLessThan(TOLERANCE);
  expectSameBits(swiglu, gate, up);
}

const poison = (floats: number) => new Float32Array(floats).fill(NaN);

describe("be_upload_matrix: a linear layer's input-first matrix, held out-major", () => {
  // placement streams a matrix in chunks whose ends fall anywhere in a row: any split must give the same matrix
  test.each([
    [7, 5],
    [130, 70],
    [3, 1000],
    [200, 1],
  ])("(%d, %d) in 32- and 16-bit words, whole and in random spans, is its transpose", (rows, cols) => {
    const n = rows * cols;
    const bits32 = Int32Array.from({ length: n }, (_, i) => (i * 2654435761 + seed) | 0);
    const bits16 = Uint16Array.from(bits32, (v) => v & 0xffff);
    // (words to upload, the same words as integers, how to read the buffer back as integers)
    const cases = [
      [new Float32Array(bits32.buffer), bits32, (b: Uint8Array) => new Int32Array(b.buffer, 0, n)],
      [bits16, bits16, (b: Uint8Array) => new Uint16Array(b.buffer, 0, n)],
    ] as const;
    for (const [words, ints, read] of cases) {
      const spans = [0, n];
      for (let i = 0; i < 5; i++) spans.push(Math.floor(Math.random() * n));
      const cuts = [...new Set(spans)].sort((a, b) => a - b);
      for (const split of [[0, n], cuts]) {
        const buffer = arena.poisoned(Math.ceil((n * words.BYTES_PER_ELEMENT) / 4));
        for (let i = 0; i + 1 < split.length; i++)
          backend.uploadMatrix(buffer, { data: words.subarray(split[i], split[i + 1]), rows, cols, first: split[i]! });
        const want = Array.from({ length: n }, (_, i) => ints[(i % rows) * cols + Math.floor(i / rows)]!);
        expect(Array.from(read(arena.bytes(buffer)))).toEqual(want);
      }
    }
  });

  test("elements past the matrix are refused, nothing written", () => {
    const buffer = arena.poisoned(12);
    expect(() => backend.uploadMatrix(buffer, { data: new Float32Array(4), rows: 3, cols: 4, first: 10 })).toThrow(
      /outside a 3 x 4 matrix/,
    );
    expect(arena.ints(buffer).every((w) => w === arena.ints(arena.poisoned(1))[0])).toBe(true);
  });
});

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
  test("linear (T = 1 and 64), attention (T = 1 at 1000 keys, 12 or 4 K/V heads; T = 100) and the LM head: identical bits on 1 and 2 threads", () => {
    const C = 768,
      H = 12,
      maxCtx = 1024;
    const k = arena.put(randomFloats(maxCtx * C, seed + 20)),
      v = arena.put(randomFloats(maxCtx * C, seed + 21));
    const w = arena.put(randomFloats(C * 3 * C, seed + 22, 0.1)),
      bias = arena.put(randomFloats(3 * C, seed + 23));
    const inp = arena.put(randomFloats(100 * 3 * C, seed + 24));
    const runs: Array<[number, (out: number) => void]> = [
      [3 * C, (out) => ops.op_linear(out, 0, inp.ptr, w.ptr, bias.ptr, 1, C, 3 * C, F32)],
      [64 * 3 * C, (out) => ops.op_linear(out, 0, inp.ptr, w.ptr, bias.ptr, 64, C, 3 * C, F32)],
      [C, (out) => ops.op_attention(out, 0, inp.ptr, k.ptr, v.ptr, state(999).ptr, 1, 1, C, H, H, maxCtx, F32)],
      [C, (out) => ops.op_attention(out, 0, inp.ptr, k.ptr, v.ptr, state(999).ptr, 1, 1, C, H, 4, maxCtx, F32)],
      [100 * C, (out) => ops.op_attention(out, 0, inp.ptr, k.ptr, v.ptr, state(0).ptr, 1, 100, C, H, H, maxCtx, F32)],
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
    const one = outputs(1),
      two = outputs(Math.max(2, threads));
    backend.cpu.cpu_set_threads(threads);
    for (const [i, o] of one.entries()) expect(Buffer.from(two[i]!.buffer).equals(Buffer.from(o.buffer))).toBe(true);
  });
});

describe("CPU ops vs TypeScript reference", () => {
  test.each([
    [1, 768],
    [5, 128],
    [3, 1600],
  ])("layernorm T=%d C=%d", (T, C) => {
    const inp = randomFloats(T * C, seed + C, 3),
      w = randomFloats(C, seed + 1),
      b = randomFloats(C, seed + 2);
    const out = arena.poisoned(T * C);
    ops.op_layernorm(out.ptr, arena.put(inp).ptr, arena.put(w).ptr, arena.put(b).ptr, T, C, 1e-5);
    expect(maxRelativeError(arena.floats(out), layernormRef(inp, w, b, T, C, 1e-5))).toBeLessThan(TOLERANCE);
  });

  test.each([
    [1, 768, 2304],
    [1, 3072, 768],
    [9, 128, 384],
    [17, 96, 100],
    [4, 64, 257],
  ])("linear T=%d C=%d OC=%d", (T, C, OC) => {
    checkLinear(backend, arena, T, C, OC);
  });

  test.each([
    [1, 0],
    [1, 700],
    [6, 10],
    [4, 1019],
  ])("kv_append + attention T=%d pos=%d (C=768, 12 heads, max_ctx=1024)", (T, pos) => {
    checkAttention(backend, arena, T, pos, 768, 12, 1024, { checkAppend: true });
  });

  test("embed at a position offset", () => {
    const T = 3,
      C = 64,
      V = 50,
      pos = 7;
    const wte = randomFloats(V * C, seed + 8),
      wpe = randomFloats(16 * C, seed + 9);
    const seq = Int32Array.from({ length: 17 }, (_, i) => (i * 7 + seed) % V);
    const out = arena.poisoned(T * C);
    ops.op_embed(out.ptr, arena.put(seq).ptr, state(pos).ptr, arena.put(wte).ptr, arena.put(wpe).ptr, 1, T, C, 16, F32);
    expect(maxRelativeError(arena.floats(out), embedRef(seq, pos, wte, wpe, T, C))).toBeLessThan(TOLERANCE);
  });

  test.each([1, 1000, 100_003])("gelu and residual N=%d", (N) => {
    const a = randomFloats(N, seed + 10, 4),
      b = randomFloats(N, seed + 11);
    const out = arena.poisoned(N);
    ops.op_gelu(out.ptr, arena.put(a).ptr, N);
    expect(maxRelativeError(arena.floats(out), geluRef(a))).toBeLessThan(TOLERANCE);
    const sum = arena.poisoned(N);
    ops.op_residual(sum.ptr, arena.put(a).ptr, arena.put(b).ptr, N);
    expect(maxRelativeError(arena.floats(sum), residualRef(a, b))).toBeLessThan(TOLERANCE);
  });

  test.each([
    [1, 768, 50257],
    [3, 128, 1001],
  ])("lm_head on the last row T=%d C=%d V=%d, then argmax", (T, C, V) => {
    const inp = randomFloats(T * C, seed + 12),
      wte = randomFloats(V * C, seed + 13, 0.1);
    const logits = arena.poisoned(V);
    ops.op_lm_head(logits.ptr, arena.put(inp).ptr, arena.put(wte).ptr, 1, T, C, V, F32);
    const got = arena.floats(logits);
    expect(maxRelativeError(got, lmHeadRef(inp, wte, T, C, V))).toBeLessThan(TOLERANCE);

    const maxCtx = 64,
      pos = 10;
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

describe.each(NARROW)("%s weights and KV cache against the float64 reference on the values they hold", (dtype) => {
  const code = DTYPES[dtype];

  test.each([
    [1, 768, 2304],
    [1, 3072, 768],
    [4, 100, 65],
    [8, 768, 768],
    [9, 128, 384],
    [17, 96, 100],
    [64, 768, 200],
  ])("linear T=%d C=%d OC=%d", (T, C, OC) => {
    checkLinear(backend, arena, T, C, OC, dtype);
  });

  test.each([
    [1, 0],
    [1, 700],
    [6, 10],
    [4, 1019],
    [100, 0],
  ])("kv_append (rows rounded as src/model/dtypes.ts rounds) + attention T=%d pos=%d (C=768, 12 heads)", (T, pos) => {
    checkAttention(backend, arena, T, pos, 768, 12, 1024, { checkAppend: true, dtype });
  });

  test("embed: the token's and the position's rows widened", () => {
    const T = 3,
      C = 100,
      V = 50,
      maxCtx = 16,
      pos = 7;
    const wte = randomFloats(V * C, seed + 30),
      wpe = randomFloats(maxCtx * C, seed + 31);
    const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 7 + seed) % V);
    const out = arena.poisoned(T * C);
    ops.op_embed(
      out.ptr,
      arena.put(seq).ptr,
      state(pos).ptr,
      arena.put(storedWords(dtype, wte)).ptr,
      arena.put(storedWords(dtype, wpe)).ptr,
      1,
      T,
      C,
      maxCtx,
      code,
    );
    expect(
      maxRelativeError(arena.floats(out), embedRef(seq, pos, rounded(dtype, wte), rounded(dtype, wpe), T, C)),
    ).toBeLessThan(TOLERANCE);
  });

  test.each([
    [1, 1, 768, 5003],
    [3, 2, 100, 1001],
    [6, 1, 768, 300],
  ])("lm_head: B=%d sequences of T=%d rows, C=%d V=%d", (B, T, C, V) => {
    const inp = randomFloats(B * T * C, seed + 32 + B),
      wte = randomFloats(V * C, seed + 33, 0.1);
    const logits = arena.poisoned(B * V);
    ops.op_lm_head(logits.ptr, arena.put(inp).ptr, arena.put(storedWords(dtype, wte)).ptr, B, T, C, V, code);
    const got = arena.floats(logits),
      table = rounded(dtype, wte);
    for (let b = 0; b < B; b++) {
      const want = lmHeadRef(inp.subarray(b * T * C, (b + 1) * T * C), table, T, C, V);
      expect(maxRelativeError(got.subarray(b * V, (b + 1) * V), want)).toBeLessThan(TOLERANCE);
    }
  });

  test("fused decode ops (B = 3 sequences at positions 5, 0, 63) against their chains of references", () => {
    const B = 3,
      C = 192,
      V = 500,
      maxCtx = 64,
      eps = 1e-5,
      positions = [5, 0, 63];
    const x = randomFloats(B * C, seed + 40, 2),
      lnW = randomFloats(C, seed + 41),
      lnB = randomFloats(C, seed + 42);
    const normed = layernormRef(x, lnW, lnB, B, C, eps);
    const st = () =>
      arena.put(
        Int32Array.from({ length: B * STATE_INTS }, (_, i) => (i % STATE_INTS === 0 ? positions[i / STATE_INTS]! : 0)),
      );
    const put = (values: Float32Array) => arena.put(storedWords(dtype, values));
    const rows = (values: Float32Array, b: number, width: number) => values.subarray(b * width, (b + 1) * width);

    // ln_linear_gelu
    const wFc = randomFloats(C * 4 * C, seed + 45, 0.1),
      bFc = randomFloats(4 * C, seed + 46);
    const fc = arena.poisoned(B * 4 * C);
    ops.op_ln_linear_gelu(
      fc.ptr,
      0,
      arena.put(x).ptr,
      arena.put(lnW).ptr,
      arena.put(lnB).ptr,
      putMatrix(arena, dtype, wFc, C, 4 * C).ptr,
      arena.put(bFc).ptr,
      B,
      C,
      4 * C,
      eps,
      code,
    );
    expect(
      maxRelativeError(arena.floats(fc), geluRef(linearRef(normed, rounded(dtype, wFc), bFc, B, C, 4 * C))),
    ).toBeLessThan(TOLERANCE);

    // linear_residual: x += inp (B, 4C) @ w (4C, C) + bias
    const inp = randomFloats(B * 4 * C, seed + 47),
      bProj = randomFloats(C, seed + 48);
    const residual = arena.put(x);
    const wProj = putMatrix(arena, dtype, wFc, 4 * C, C);
    ops.op_linear_residual(residual.ptr, 0, arena.put(inp).ptr, wProj.ptr, arena.put(bProj).ptr, B, 4 * C, C, code);
    expect(
      maxRelativeError(arena.floats(residual), residualRef(x, linearRef(inp, rounded(dtype, wFc), bProj, B, 4 * C, C))),
    ).toBeLessThan(TOLERANCE);

    // ln_lm_head_argmax: logits, and each sequence's next token after its position
    const wte = randomFloats(V * C, seed + 49, 0.1);
    const logits = arena.poisoned(B * V),
      seqs = arena.put(new Int32Array(B * (maxCtx + 1)).fill(-1)),
      states = st();
    ops.op_ln_lm_head_argmax(
      logits.ptr,
      seqs.ptr,
      states.ptr,
      0,
      arena.put(x).ptr,
      arena.put(lnW).ptr,
      arena.put(lnB).ptr,
      put(wte).ptr,
      B,
      C,
      V,
      maxCtx,
      eps,
      code,
    );
    const got = arena.floats(logits),
      tokens = arena.ints(seqs),
      after = arena.ints(states);
    positions.forEach((pos, b) => {
      expect(
        maxRelativeError(
          rows(got, b, V),
          lmHeadRef(rows(Float32Array.from(normed), b, C), rounded(dtype, wte), 1, C, V),
        ),
      ).toBeLessThan(TOLERANCE);
      expect(tokens[b * (maxCtx + 1) + pos + 1]).toBe(argmaxRef(rows(got, b, V)));
      expect(after[b * STATE_INTS]).toBe(pos + 1);
    });
  });
});

describe("ln_qkv against the float64 reference: k and v of kv_C columns (multi-head, grouped-query, multi-query)", () => {
  test.each((["f32", ...NARROW] as DtypeName[]).flatMap((dtype) => [192, 64, 32].map((kvC) => [dtype, kvC] as const)))(
    "weights and cache %s, kv_C = %d of C = 192",
    (dtype, kvC) => checkLnQkv(dtype, kvC),
  );
});

describe("kv_append's rounding, bit for bit against src/model/dtypes.ts", () => {
  const f32Bits = new Uint32Array(1),
    f32 = new Float32Array(f32Bits.buffer);
  const fromBits = (word: number) => {
    f32Bits[0] = word;
    return f32[0]!;
  };
  const bitsOf = (x: number) => {
    f32[0] = x;
    return f32Bits[0]!;
  };
  const h16 = new Uint16Array(1),
    f16 = new Float16Array(h16.buffer);
  const valueOf16 = (dtype: DtypeName, bits: number) => {
    if (dtype === "bf16") return bf16Value(bits);
    h16[0] = bits;
    return f16[0]!;
  };
  const bitsOf16 = (dtype: DtypeName, x: number) => {
    if (dtype === "bf16") return bf16Bits(x);
    f16[0] = x;
    return h16[0]!;
  };

  // NaNs with payloads and signs, fp32's extremes and subnormals (bf16 rounds FLT_MAX up to Inf; f16 from 65520 on)
  const SPECIALS = [
    NaN,
    fromBits(0x7f800001),
    fromBits(0xffc00001),
    fromBits(0x7fffffff),
    3.4028234663852886e38,
    -3.4028234663852886e38,
    1e-40,
    -1e-40,
    1e5,
    -1e5,
    1e-10,
  ];

  /**
   * Every finite 16-bit value, the midpoint between it and the next (a tie: to even) and the fp32 values either
   * side of that midpoint, and the specials.
   */
  function candidates(dtype: DtypeName): Float32Array {
    const out: number[] = [...SPECIALS];
    for (let bits = 0; bits < 0x10000; bits++) {
      const x = valueOf16(dtype, bits),
        next = valueOf16(dtype, bits + 1);
      if (!Number.isFinite(x)) continue;
      out.push(x);
      if (!Number.isFinite(next)) continue;
      const mid = Math.fround((x + next) / 2); // exact: fp32 has the bits
      out.push(mid, fromBits(bitsOf(mid) + 1), fromBits(bitsOf(mid) - 1));
    }
    if (dtype === "f16") out.push(65520, -65520, 65519.99609375); // the overflow threshold (a tie: to even is Inf) and below it
    return Float32Array.from(out);
  }

  test.each(NARROW)(
    "%s: every 16-bit value, the ties between neighbours and the fp32 values beside them, NaNs and overflow",
    (dtype) => {
      const values = candidates(dtype),
        C = values.length,
        maxCtx = 1;
      const qkv = new Float32Array(3 * C);
      qkv.set(values, C); // k = the candidates, v = zeros
      const words = Math.ceil((C * 2) / 4);
      const k = arena.put(new Int32Array(words)),
        v = arena.put(new Int32Array(words));
      ops.op_kv_append(k.ptr, v.ptr, arena.put(qkv).ptr, state(0).ptr, 1, 1, C, C, maxCtx, DTYPES[dtype]);
      const stored = new Uint16Array(arena.ints(k).buffer, 0, C);
      const isNaN16 = (b: number) => (b & 0x7fff) > (dtype === "bf16" ? 0x7f80 : 0x7c00);
      const mismatches: string[] = [];
      values.forEach((x, i) => {
        const ok = Number.isNaN(x) ? isNaN16(stored[i]!) : stored[i] === bitsOf16(dtype, x);
        if (!ok && mismatches.length < 10)
          mismatches.push(
            `${x} (0x${bitsOf(x).toString(16)}): stored 0x${stored[i]!.toString(16)}, want 0x${bitsOf16(dtype, x).toString(16)}`,
          );
      });
      expect(mismatches).toEqual([]);
      expect(C).toBeGreaterThan(4 * 60000);
    },
  );
});

const BATCHES = [2, 3, 4, MAX_BATCH];
const DTYPE_NAMES: DtypeName[] = ["f32", "bf16", "f16"];

describe.each(DTYPE_NAMES)(
  "a batch computes every sequence as it would alone, bit for bit (%s weights and cache)",
  (dtype) => {
    const C = 768,
      H = 12,
      maxCtx = 512,
      V = 1001,
      eps = 1e-5,
      code = DTYPES[dtype];
    // different positions: 0, the last row, and key counts on both sides of the threaded key-range split
    const POSITIONS = [3, 400, 0, 511, 77, 250, 33, 129];
    const stateOf = (B: number, positions = POSITIONS) =>
      Int32Array.from({ length: B * STATE_INTS }, (_, i) => (i % STATE_INTS === 0 ? positions[i / STATE_INTS]! : 0));
    const shared = (values: Float32Array): BatchBuffer => ({ init: storedWords(dtype, values), perSequence: 0 });
    const fp32 = (values: Float32Array): BatchBuffer => ({ init: values, perSequence: 0 });
    const perSequence = (init: Float32Array | Int32Array, B: number): BatchBuffer => ({
      init,
      perSequence: init.byteLength / B,
    });
    // B caches of maxCtx rows of `width` (C, or fewer K/V heads' columns)
    const cacheOf = (B: number, salt: number, width = C): BatchBuffer =>
      perSequence(storedWords(dtype, randomFloats(B * maxCtx * width, seed + salt)), B);
    const tokensOf = (B: number) => Int32Array.from({ length: B * (maxCtx + 1) }, (_, i) => (i * 7919 + seed) % V);
    const wte = randomFloats(V * C, seed + 60, 0.1),
      wpe = randomFloats(maxCtx * C, seed + 61, 0.1);
    const wQkv = randomFloats(C * 3 * C, seed + 62, 0.1),
      bQkv = randomFloats(3 * C, seed + 63);
    const wFc = randomFloats(C * 4 * C, seed + 64, 0.1),
      bFc = randomFloats(4 * C, seed + 65);
    const lnW = randomFloats(C, seed + 66),
      lnB = randomFloats(C, seed + 67);

    test.each(BATCHES)(
      "embed, layernorm, linear (768→2304 in chunks of rows; 100→65 in one), lm_head (T = 1, 2), argmax: B=%d",
      (B) => {
        const x = (rows: number, salt: number) => perSequence(randomFloats(B * rows * C, seed + salt + B), B);
        expectBatchEqualsSingles(
          backend,
          arena,
          B,
          {
            out: perSequence(poison(B * C), B),
            seq: perSequence(tokensOf(B), B),
            state: perSequence(stateOf(B), B),
            wte: shared(wte),
            wpe: shared(wpe),
          },
          (p, n) => ops.op_embed(p.out!, p.seq!, p.state!, p.wte!, p.wpe!, n, 1, C, maxCtx, code),
        );
        expectBatchEqualsSingles(
          backend,
          arena,
          B,
          { out: perSequence(poison(B * C), B), inp: x(1, 70), w: fp32(lnW), b: fp32(lnB) },
          (p, n) => ops.op_layernorm(p.out!, p.inp!, p.w!, p.b!, n, C, eps),
        );
        expectBatchEqualsSingles(
          backend,
          arena,
          B,
          { out: perSequence(poison(B * 3 * C), B), inp: x(1, 71), w: shared(wQkv), b: fp32(bQkv) },
          (p, n) => ops.op_linear(p.out!, 0, p.inp!, p.w!, p.b!, n, C, 3 * C, code),
        );
        expectBatchEqualsSingles(
          backend,
          arena,
          B,
          {
            out: perSequence(poison(B * 65), B),
            inp: perSequence(randomFloats(B * 100, seed + 72), B),
            w: shared(randomFloats(100 * 65, seed + 73)),
            b: fp32(bFc.subarray(0, 65)),
          },
          (p, n) => ops.op_linear(p.out!, 0, p.inp!, p.w!, p.b!, n, 100, 65, code),
        );
        for (const T of [1, 2]) {
          expectBatchEqualsSingles(
            backend,
            arena,
            B,
            { logits: perSequence(poison(B * V), B), inp: x(T, 74 + T), wte: shared(wte) },
            (p, n) => ops.op_lm_head(p.logits!, p.inp!, p.wte!, n, T, C, V, code),
          );
        }
        expectBatchEqualsSingles(
          backend,
          arena,
          B,
          {
            seq: perSequence(tokensOf(B), B),
            state: perSequence(stateOf(B), B),
            logits: perSequence(randomFloats(B * V, seed + 77), B),
          },
          (p, n) => ops.op_argmax(p.seq!, p.state!, 0, p.logits!, n, V, 1, maxCtx),
        );
      },
    );

    // the shared-heads path: ranges handed out two at a time, each prefetching the next one's keys, which may be
    // the next sequence's
    test.each(BATCHES)("kv_append and attention, decode (T = 1), 12 query heads sharing 4 K/V heads: B=%d", (B) => {
      const kvC = C / 3;
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          out: perSequence(poison(B * C), B),
          qkv: perSequence(randomFloats(B * (C + 2 * kvC), seed + 86 + B, 2), B),
          k: cacheOf(B, 87, kvC),
          v: cacheOf(B, 88, kvC),
          state: perSequence(stateOf(B), B),
        },
        (p, n) => {
          ops.op_kv_append(p.k!, p.v!, p.qkv!, p.state!, n, 1, C, kvC, maxCtx, code);
          ops.op_attention(p.out!, 0, p.qkv!, p.k!, p.v!, p.state!, n, 1, C, H, 4, maxCtx, code);
        },
      );
    });

    test.each(BATCHES)("kv_append and attention, decode (T = 1) and many queries (T = 3): B=%d", (B) => {
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          out: perSequence(poison(B * C), B),
          qkv: perSequence(randomFloats(B * 3 * C, seed + 80 + B, 2), B),
          k: cacheOf(B, 81),
          v: cacheOf(B, 82),
          state: perSequence(stateOf(B), B),
        },
        (p, n) => {
          ops.op_kv_append(p.k!, p.v!, p.qkv!, p.state!, n, 1, C, C, maxCtx, code);
          ops.op_attention(p.out!, 0, p.qkv!, p.k!, p.v!, p.state!, n, 1, C, H, H, maxCtx, code);
        },
      );
      const T = 3,
        positions = POSITIONS.map((pos) => Math.min(pos, maxCtx - T));
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          out: perSequence(poison(B * T * C), B),
          qkv: perSequence(randomFloats(B * T * 3 * C, seed + 83 + B, 2), B),
          k: cacheOf(B, 84),
          v: cacheOf(B, 85),
          state: perSequence(stateOf(B, positions), B),
        },
        (p, n) => {
          ops.op_kv_append(p.k!, p.v!, p.qkv!, p.state!, n, T, C, C, maxCtx, code);
          ops.op_attention(p.out!, 0, p.qkv!, p.k!, p.v!, p.state!, n, T, C, H, H, maxCtx, code);
        },
      );
    });

    test.each(BATCHES)("fused decode ops: ln_qkv, ln_linear_gelu, linear_residual, ln_lm_head_argmax: B=%d", (B) => {
      const x = () => perSequence(randomFloats(B * C, seed + 90 + B, 2), B);
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          qkv: perSequence(poison(B * 3 * C), B),
          k: cacheOf(B, 91),
          v: cacheOf(B, 92),
          x: x(),
          lnW: fp32(lnW),
          lnB: fp32(lnB),
          w: shared(wQkv),
          b: fp32(bQkv),
          state: perSequence(stateOf(B), B),
        },
        (p, n) =>
          ops.op_ln_qkv(
            p.qkv!,
            p.k!,
            p.v!,
            0,
            p.x!,
            p.lnW!,
            p.lnB!,
            p.w!,
            p.b!,
            p.state!,
            n,
            C,
            C,
            maxCtx,
            eps,
            code,
            code,
          ),
      );
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          out: perSequence(poison(B * 4 * C), B),
          x: x(),
          lnW: fp32(lnW),
          lnB: fp32(lnB),
          w: shared(wFc),
          b: fp32(bFc),
        },
        (p, n) => ops.op_ln_linear_gelu(p.out!, 0, p.x!, p.lnW!, p.lnB!, p.w!, p.b!, n, C, 4 * C, eps, code),
      );
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          x: x(),
          inp: perSequence(randomFloats(B * 4 * C, seed + 93), B),
          w: shared(wFc),
          b: fp32(bFc.subarray(0, C)),
        },
        (p, n) => ops.op_linear_residual(p.x!, 0, p.inp!, p.w!, p.b!, n, 4 * C, C, code),
      );
      expectBatchEqualsSingles(
        backend,
        arena,
        B,
        {
          logits: perSequence(poison(B * V), B),
          seq: perSequence(tokensOf(B), B),
          state: perSequence(stateOf(B), B),
          x: x(),
          lnW: fp32(lnW),
          lnB: fp32(lnB),
          wte: shared(wte),
        },
        (p, n) =>
          ops.op_ln_lm_head_argmax(
            p.logits!,
            p.seq!,
            p.state!,
            0,
            p.x!,
            p.lnW!,
            p.lnB!,
            p.wte!,
            n,
            C,
            V,
            maxCtx,
            eps,
            code,
          ),
      );
    });
  },
);

describe("an unknown storage type code is rejected: an invalid-value error, and nothing written", () => {
  test.each([3, -1])("code %d, in every op that takes one (and a fused op whose other code is valid)", (bad) => {
    const C = 64,
      OC = 96,
      V = 50,
      maxCtx = 8,
      eps = 1e-5;
    const NOTHING = 0x5a5a5a5a; // every written-to buffer starts as this word
    const filled = (words: number) => arena.put(new Int32Array(words).fill(NOTHING));
    const out = filled(4 * C * 4),
      k = filled(maxCtx * C),
      v = filled(maxCtx * C),
      seq = filled(maxCtx + 1);
    const pos = arena.put(Int32Array.of(2, 0, 0, 0)); // a real position (the op must not move it either)
    const x = arena.put(randomFloats(4 * C, seed + 100)),
      w = arena.put(randomFloats(4 * C * OC, seed + 101)),
      b = arena.put(randomFloats(4 * C, seed + 102));
    const tokens = arena.put(new Int32Array(maxCtx + 1));
    const calls: Array<[string, () => void]> = [
      ["embed", () => ops.op_embed(out.ptr, tokens.ptr, pos.ptr, w.ptr, w.ptr, 1, 1, C, maxCtx, bad)],
      ["linear", () => ops.op_linear(out.ptr, 0, x.ptr, w.ptr, b.ptr, 1, C, OC, bad)],
      ["kv_append", () => ops.op_kv_append(k.ptr, v.ptr, x.ptr, pos.ptr, 1, 1, C, C, maxCtx, bad)],
      ["attention", () => ops.op_attention(out.ptr, 0, x.ptr, k.ptr, v.ptr, pos.ptr, 1, 1, C, 2, 2, maxCtx, bad)],
      ["lm_head", () => ops.op_lm_head(out.ptr, x.ptr, w.ptr, 1, 1, C, V, bad)],
      [
        "ln_qkv (bad weights)",
        () =>
          ops.op_ln_qkv(
            out.ptr,
            k.ptr,
            v.ptr,
            0,
            x.ptr,
            b.ptr,
            b.ptr,
            w.ptr,
            b.ptr,
            pos.ptr,
            1,
            C,
            C,
            maxCtx,
            eps,
            bad,
            F32,
          ),
      ],
      [
        "ln_qkv (bad cache)",
        () =>
          ops.op_ln_qkv(
            out.ptr,
            k.ptr,
            v.ptr,
            0,
            x.ptr,
            b.ptr,
            b.ptr,
            w.ptr,
            b.ptr,
            pos.ptr,
            1,
            C,
            C,
            maxCtx,
            eps,
            F32,
            bad,
          ),
      ],
      [
        "ln_linear_gelu",
        () => ops.op_ln_linear_gelu(out.ptr, 0, x.ptr, b.ptr, b.ptr, w.ptr, b.ptr, 1, C, OC, eps, bad),
      ],
      ["linear_residual", () => ops.op_linear_residual(out.ptr, 0, x.ptr, w.ptr, b.ptr, 1, C, OC, bad)],
      [
        "ln_lm_head_argmax",
        () =>
          ops.op_ln_lm_head_argmax(out.ptr, seq.ptr, pos.ptr, 0, x.ptr, b.ptr, b.ptr, w.ptr, 1, C, V, maxCtx, eps, bad),
      ],
    ];
    for (const [name, call] of calls) {
      call();
      expect({
        name,
        error: (() => {
          try {
            backend.synchronize();
            return "none";
          } catch (e) {
            return (e as Error).message;
          }
        })(),
      }).toEqual({ name, error: expect.stringContaining("cpuErrorInvalidValue") });
    }
    for (const buffer of [out, k, v, seq])
      expect(Array.from(arena.ints(buffer)).every((word) => word === NOTHING)).toBe(true);
    expect(Array.from(arena.ints(pos))).toEqual([2, 0, 0, 0]);
  });
});

// The paths that split work across threads and the micro-kernel's tiles (cuda/cpu_math.h: 6 rows × 64
// columns with AVX-512, 6 × 16 with AVX2, 4 × 8 without AVX), on the library as built here (-march=native)
// and built without AVX-512 and without AVX, so that every tile shape is checked on this machine.
const VARIANTS: Array<[string, string[]]> = [
  ["native", []],
  ["no-avx512", ["-mno-avx512f"]],
  ["no-avx", ["-mno-avx"]],
];

describe.each(VARIANTS)("CPU library %s: threaded paths and micro-kernel edges", (variant, flags) => {
  const lib = flags.length
    ? CpuBackend.openPath(ensureBuilt("cpu", { extraFlags: flags, variant, quiet: true }).path)
    : backend;
  const on = new DeviceArena(lib);
  afterAll(() => {
    on.release();
    if (lib !== backend) lib.close();
  });

  test("gelu and swiglu: an element's result is the same bits in a vector's lane as in a loop's tail", () =>
    checkLanesEqualTails(lib, on));

  // T = 1..8: a dot product per output over its weight row (threaded from 2^18 multiply-adds on);
  // T >= 9: column panels through the micro-kernel; OC not a multiple of the tile width, C past one depth block (384)
  test.each([
    [1, 300, 200],
    [2, 768, 768],
    [3, 7, 65],
    [5, 513, 129],
    [7, 257, 1000],
    [8, 1, 33],
    [9, 600, 65],
    [9, 3, 5],
    [10, 257, 129],
    [12, 256, 64],
    [13, 513, 200],
    [31, 100, 17],
    [64, 768, 2304],
  ])("linear T=%d C=%d OC=%d", (T, C, OC) => checkLinear(lib, on, T, C, OC));

  // T = 1: key ranges of 32 (one range, a boundary, many ranges split across threads), merged in order
  // T > 1: query blocks of 8 micro-tile rows × key blocks of 64; heads of 64, 40 and 48 channels
  test.each([
    [1, 0, 768, 12],
    [1, 31, 768, 12],
    [1, 32, 768, 12],
    [1, 1000, 768, 12],
    [1, 700, 200, 5],
    [2, 0, 768, 12],
    [5, 61, 768, 12],
    [9, 100, 192, 3],
    [47, 0, 768, 12],
    [48, 0, 200, 5],
    [49, 16, 96, 2],
    [100, 0, 768, 12],
    [60, 70, 768, 12],
    [130, 3, 200, 5],
  ])("attention T=%d pos=%d C=%d heads=%d (max_ctx 1024)", (T, pos, C, H) =>
    checkAttention(lib, on, T, pos, C, H, 1024),
  );

  // one query over K/V heads shared by groups of 2+ (the shared path: a K/V head's columns loaded once for its
  // query heads, 4 or 2 of them at a time, then 2 and 1 for the rest of a group of 7 or 3 with AVX-512; blocked over
  // keys and up to 4 heads (2 without AVX) with 16 registers; the range's rows prefetched, ranges shorter where rows
  // are long): head sizes of 4 and 8 vectors (64 and 128 with AVX-512; 32/64, and 128 blocked, with AVX; 16/32/64
  // without), groups of 2, 3, 4, 5 (4 + a one-head block), 7 and 8, whole blocks of keys and the ones past them
  test.each([
    [1, 100, 2048, 32, 8],
    [1, 1000, 2048, 32, 8],
    [1, 1000, 576, 9, 3],
    [1, 999, 2048, 16, 8],
    [1, 700, 448, 7, 1],
    [1, 77, 1024, 8, 2],
    [1, 600, 1024, 16, 2],
    [1, 40, 512, 16, 4],
    [1, 300, 256, 8, 2],
    [1, 130, 512, 8, 1],
    [1, 45, 1024, 16, 8],
    [1, 52, 512, 16, 8],
    [1, 99, 640, 10, 2],
    [1, 100, 1536, 12, 4],
    [1, 77, 1280, 10, 2],
  ])("attention T=%d pos=%d C=%d heads=%d, %d K/V heads (max_ctx 1024)", (T, pos, C, H, nKv) =>
    checkAttention(lib, on, T, pos, C, H, 1024, { nKv }),
  );

  // bf16/f16 widened by this build's instructions (vpmovzxwd + vpslld; vcvtph2ps where F16C is, integer lanes
  // where not): whole vectors and the columns past them, in dot products, packed panels, cache rows and key blocks
  test.each(NARROW)(
    "%s: linear (few rows and packed panels), kv_append + attention (one query and many), embed",
    (dtype) => {
      for (const [T, C, OC] of [
        [1, 300, 200],
        [3, 7, 65],
        [8, 1, 33],
        [2, 768, 768],
        [9, 600, 65],
        [13, 513, 200],
        [31, 100, 17],
      ] as const) {
        checkLinear(lib, on, T, C, OC, dtype);
      }
      for (const [T, pos, C, H, nKv] of [
        [1, 31, 768, 12, 12],
        [1, 700, 200, 5, 5],
        [9, 100, 192, 3, 3],
        [49, 16, 96, 2, 2],
        [60, 70, 768, 12, 12],
        [1, 300, 2048, 32, 8],
        [1, 201, 1024, 8, 1],
        [1, 99, 640, 10, 2],
        [1, 150, 384, 12, 4],
        [1, 77, 1536, 12, 4],
        [1, 60, 1024, 16, 8],
      ] as const) {
        checkAttention(lib, on, T, pos, C, H, 1024, { checkAppend: true, dtype, nKv });
      }
      const T = 2,
        C = 37,
        V = 9,
        maxCtx = 8,
        pos = 3;
      const wte = randomFloats(V * C, seed + 110),
        wpe = randomFloats(maxCtx * C, seed + 111);
      const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 5 + seed) % V);
      const out = on.poisoned(T * C);
      lib.ops.op_embed(
        out.ptr,
        on.put(seq).ptr,
        on.put(Int32Array.of(pos, 0, 0, 0)).ptr,
        on.put(storedWords(dtype, wte)).ptr,
        on.put(storedWords(dtype, wpe)).ptr,
        1,
        T,
        C,
        maxCtx,
        DTYPES[dtype],
      );
      expect(
        maxRelativeError(on.floats(out), embedRef(seq, pos, rounded(dtype, wte), rounded(dtype, wpe), T, C)),
      ).toBeLessThan(TOLERANCE);
    },
  );

  // embed of a table holding every 16-bit pattern, plus a position row of -0 (x + -0 is x, for -0 too): each
  // element as this build widens it, against src/model/dtypes.ts (NaN: any NaN); rows of 257 put every lane
  // position, and the column past the last whole vector, through the patterns
  test.each(NARROW)("%s: every 16-bit pattern widens exactly", (dtype) => {
    const C = 257,
      V = Math.ceil(0x10000 / C),
      T = V,
      maxCtx = V;
    const table = Uint16Array.from({ length: V * C }, (_, i) => i & 0xffff);
    const negativeZeros = new Uint16Array(maxCtx * C).fill(0x8000);
    const words = (halves: Uint16Array) => new Int32Array(halves.buffer.slice(0, Math.ceil(halves.byteLength / 4) * 4));
    const seq = Int32Array.from({ length: maxCtx + 1 }, (_, i) => i % V);
    const out = on.poisoned(T * C);
    lib.ops.op_embed(
      out.ptr,
      on.put(seq).ptr,
      on.put(Int32Array.of(0, 0, 0, 0)).ptr,
      on.put(words(table)).ptr,
      on.put(words(negativeZeros)).ptr,
      1,
      T,
      C,
      maxCtx,
      DTYPES[dtype],
    );
    const got = new Uint32Array(on.floats(out).buffer);
    const want =
      dtype === "bf16" ? Float32Array.from(table, bf16Value) : Float32Array.from(new Float16Array(table.buffer));
    const wantBits = new Uint32Array(want.buffer);
    const wrong = Array.from(table).flatMap((pattern, i) =>
      (Number.isNaN(want[i]!) ? (got[i]! & 0x7fffffff) > 0x7f800000 : got[i] === wantBits[i])
        ? []
        : [`0x${pattern.toString(16)} → 0x${got[i]!.toString(16)}`],
    );
    expect(wrong.slice(0, 10)).toEqual([]);
  });

  // the dot products of linear and the LM head (vector chains, lanes, columns past the last whole step) follow
  // this build's vector width; each row must still get the bits it gets alone
  test.each(NARROW)(
    `%s: linear with up to ${MAX_BATCH} rows and the LM head with as many sequences give each row the bits it gets alone`,
    (dtype) => {
      const C = 301,
        OC = 1000,
        V = 77; // C: a partial vector at every width
      const w = storedWords(dtype, randomFloats(C * OC, seed + 112, 0.1)),
        bias = randomFloats(OC, seed + 113);
      for (const B of [2, 3, 5, MAX_BATCH]) {
        const inp = randomFloats(B * C, seed + 114 + B);
        expectBatchEqualsSingles(
          lib,
          on,
          B,
          {
            out: { init: poison(B * OC), perSequence: 4 * OC },
            inp: { init: inp, perSequence: 4 * C },
            w: { init: w, perSequence: 0 },
            b: { init: bias, perSequence: 0 },
          },
          (p, n) => lib.ops.op_linear(p.out!, 0, p.inp!, p.w!, p.b!, n, C, OC, DTYPES[dtype]),
        );
        expectBatchEqualsSingles(
          lib,
          on,
          B,
          {
            logits: { init: poison(B * V), perSequence: 4 * V },
            inp: { init: inp, perSequence: 4 * C },
            wte: { init: w, perSequence: 0 },
          },
          (p, n) => lib.ops.op_lm_head(p.logits!, p.inp!, p.wte!, n, 1, C, V, DTYPES[dtype]),
        );
      }
    },
  );
});
