// Every op on B sequences and in every storage type (cuda/ops.h), on a device backend against the CPU twins, and
// each batch against its sequences run one at a time on the device, bit for bit (ops.h: a batch gives every
// sequence the bits it gets alone).
//
// Weights, embedding tables and KV caches are drawn at random and rounded to their storage type first, so the
// device and the CPU twin see the same values in the same storage type (CPU_TWIN_DTYPES) — the same math on the same
// numbers, so the fp32 tolerance holds. A cache row a kernel writes must be the fp32 value rounded to nearest even
// exactly as src/model/dtypes.ts rounds it.
import type { Backend } from "../backends/backend.ts";
import { bf16Bits, bf16Value, roundInPlace, type StoredWords } from "../model/dtypes.ts";
import { DTYPE_BYTES, DTYPE_NAMES, DTYPES, MAX_BATCH, STATE_INTS, type DtypeName } from "../ops.ts";
import type { DeviceArena } from "./arena.ts";
import { maxRelativeError, randomFloats } from "./compare.ts";
import { expectedArgmax, ropeTable, stateAt, type KernelCase, type Pair, type Pointers } from "./kernel-case.ts";

/**
 * The storage types the CPU twins (cuda/*.cpp) run: all of them. (A device op in a type a twin did not run would be
 * compared with the twin run in fp32 on the widened values, the same math.)
 */
export const CPU_TWIN_DTYPES: readonly DtypeName[] = DTYPE_NAMES;

export const BATCHES = [1, 2, 3, 4, MAX_BATCH] as const;

/** Values held in a storage type, already rounded to it: widening gives them back exactly. */
interface Stored {
  dtype: DtypeName;
  values: Float32Array;
  /** a linear layer's (in, out) weight, placed in each backend's layout of it (Backend.uploadMatrix) */
  matrix?: { rows: number; cols: number };
}
const stored = (dtype: DtypeName, values: Float32Array): Stored => ({ dtype, values: roundInPlace(dtype, values) });
/** a (rows = in, cols = out) weight matrix of random values in a storage type */
const storedMatrix = (dtype: DtypeName, rows: number, cols: number, seed: number): Stored => ({
  ...stored(dtype, randomFloats(rows * cols, seed, 0.1)),
  matrix: { rows, cols },
});
type Data = Float32Array | Int32Array | Stored;
const isStored = (d: Data): d is Stored => !ArrayBuffer.isView(d);

/** The bytes of `values` (exactly representable) in a storage type. */
export function encode(dtype: DtypeName, values: Float32Array): StoredWords {
  if (dtype === "bf16") return Uint16Array.from(values, bf16Bits);
  if (dtype === "f16") return new Float16Array(values);
  return values;
}

/** Bytes of a storage type, widened to fp32. */
export function decode(dtype: DtypeName, bytes: Uint8Array): Float32Array {
  const n = bytes.byteLength / DTYPE_BYTES[dtype];
  if (dtype === "bf16") return Float32Array.from(new Uint16Array(bytes.buffer, bytes.byteOffset, n), bf16Value);
  if (dtype === "f16") return Float32Array.from(new Float16Array(bytes.buffer, bytes.byteOffset, n));
  return new Float32Array(bytes.buffer, bytes.byteOffset, n);
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
/** Bytes as 32-bit words (the last one zero-padded), for the bit-for-bit comparison of two runs. */
function asWords(bytes: Uint8Array): Int32Array {
  const words = new Int32Array(Math.ceil(bytes.length / 4));
  new Uint8Array(words.buffer).set(bytes);
  return words;
}

/** One backend's part: its arena, and the storage type it runs for each type the case names. */
interface Side {
  arena: DeviceArena;
  dtype(d: DtypeName): DtypeName;
}

/** An op's results on one side: every output and updated input as bytes, and how to read them. */
class Results {
  constructor(
    readonly bytes: Record<string, Uint8Array>,
    private readonly kinds: Record<string, DtypeName | "i32">,
  ) {}
  floats(name: string): Float32Array {
    const kind = this.kinds[name]!;
    return decode(kind === "i32" ? "f32" : kind, this.bytes[name]!);
  }
  ints(name: string): Int32Array {
    const b = this.bytes[name]!;
    return new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  }
}

interface BatchSpec {
  kernel: string;
  /** the shape, without the batch and storage types */
  shape: string;
  /** inputs every sequence shares (weights, tables) */
  shared(seed: number): Record<string, Data>;
  /** sequence b's inputs, each the same size for every b, laid out sequence after sequence */
  sequence(b: number, seed: number): Record<string, Data>;
  /** fp32 words of each output, per sequence */
  outputs: Record<string, number>;
  /** per-sequence inputs the op writes: read back (fp32 ones compared with the twin's within the tolerance) */
  updated?: string[];
  /** zeroed scratch words a run of B sequences needs, by name */
  scratch?(backend: Backend, B: number): Record<string, number>;
  run(backend: Backend, p: Pointers, B: number, code: (d: DtypeName) => number): void;
  /** exact rules on the device's results of the batch (cache rows, tokens); false fails the case */
  exact?(device: Results, cpu: Results, inputs: Record<string, Data>[], B: number): boolean;
}

function concat(parts: Data[]): Data {
  const first = parts[0]!;
  if (isStored(first))
    return {
      dtype: first.dtype,
      values: concatArrays(
        Float32Array,
        parts.map((p) => (p as Stored).values),
      ),
    };
  return first instanceof Int32Array
    ? concatArrays(Int32Array, parts as Int32Array[])
    : concatArrays(Float32Array, parts as Float32Array[]);
}
function concatArrays<A extends Float32Array | Int32Array>(Kind: { new (n: number): A }, parts: A[]): A {
  const out = new Kind(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Room for the partials of every case here (cuda/ops.h op_partials_bytes): 8 rows, C <= 640, OC <= 1024, V <= 4096. */
const PARTIALS = { maxRows: 8, maxIn: 640, maxOut: 1024, V: 4096 };

/** Runs `spec` on one side for the given sequences' inputs (B = their count). */
function runSpec(
  side: Side,
  spec: BatchSpec,
  shared: Record<string, Data>,
  sequences: Record<string, Data>[],
): Results {
  const { arena } = side;
  const backend = arena.backend;
  const B = sequences.length;
  const kinds: Record<string, DtypeName | "i32"> = {};
  const put = (name: string, d: Data) => {
    if (isStored(d)) {
      kinds[name] = side.dtype(d.dtype);
      const words = encode(kinds[name], d.values);
      return d.matrix ? arena.putMatrix(words, d.matrix.rows, d.matrix.cols) : arena.put(words);
    }
    kinds[name] = d instanceof Int32Array ? "i32" : "f32";
    return arena.put(d);
  };
  const { maxRows, maxIn, maxOut, V } = PARTIALS;
  const p: Pointers = { partials: arena.zeroed(Math.max(1, backend.partialsBytes(maxRows, maxIn, maxOut, V) / 4)).ptr };
  const buffers = Object.fromEntries([
    ...Object.entries(shared).map(([name, d]) => [name, put(name, d)] as const),
    ...Object.keys(sequences[0]!).map((name) => [name, put(name, concat(sequences.map((s) => s[name]!)))] as const),
  ]);
  const outputs = Object.fromEntries(
    Object.entries(spec.outputs).map(([name, words]) => {
      kinds[name] = "f32";
      return [name, arena.poisoned(words * B)] as const;
    }),
  );
  for (const [name, words] of Object.entries(spec.scratch?.(backend, B) ?? {}))
    p[name] = words > 0 ? arena.zeroed(words).ptr : 0;
  for (const [name, b] of Object.entries({ ...buffers, ...outputs })) p[name] = b.ptr;
  spec.run(backend, p, B, (d) => DTYPES[side.dtype(d)]);
  const read = [...Object.keys(spec.outputs), ...(spec.updated ?? [])];
  return new Results(
    Object.fromEntries(read.map((name) => [name, arena.bytes(outputs[name] ?? buffers[name]!)])),
    kinds,
  );
}

/** The case of one spec at B sequences: the device against the twin, then (B > 1) against its sequences alone. */
function batchCase(spec: BatchSpec, B: number, dtypes: string): KernelCase {
  return {
    kernel: spec.kernel,
    shape: `B=${B} ${spec.shape} ${dtypes}${B > 1 ? ", each sequence as alone, bit for bit" : ""}`,
    run: (pair: Pair, seed: number) => {
      const device: Side = { arena: pair.device, dtype: (d) => d };
      const cpu: Side = { arena: pair.cpu, dtype: (d) => (CPU_TWIN_DTYPES.includes(d) ? d : "f32") };
      const shared = spec.shared(seed);
      const sequences = Array.from({ length: B }, (_, b) => spec.sequence(b, seed));
      const got = runSpec(device, spec, shared, sequences);
      for (const [name, bytes] of Object.entries(got.bytes)) pair.note(name, asWords(bytes));
      const want = runSpec(cpu, spec, shared, sequences);
      const fp32 = [
        ...Object.keys(spec.outputs),
        ...(spec.updated ?? []).filter((n) => !isStored(sequences[0]![n]!) && sequences[0]![n] instanceof Float32Array),
      ];
      const error = Math.max(0, ...fp32.map((name) => maxRelativeError(got.floats(name), want.floats(name))));
      if (spec.exact && !spec.exact(got, want, sequences, B)) return Infinity;
      if (B === 1) return error;
      const alone = sequences.map((s) => runSpec(device, spec, shared, [s]));
      const asAlone = Object.entries(got.bytes).every(([name, bytes]) => {
        const per = bytes.length / B;
        return alone.every((r, b) => sameBytes(bytes.subarray(b * per, (b + 1) * per), r.bytes[name]!));
      });
      return asAlone ? error : Infinity;
    },
  };
}

// ---- inputs --------------------------------------------------------------------------------------------------------
const EPS = 1e-5;
/** Sequence b's position: spread, so sequences differ (the largest at or past the cache's end where `last`). */
const positionOf = (b: number, base: number, maxCtx: number) => Math.min(base + 5 * b, maxCtx);
const tokens = (maxCtx: number, V: number, seed: number) =>
  Int32Array.from({ length: maxCtx + 1 }, (_, i) => (i * 7919 + seed * 31) % V);
const untouched = (maxCtx: number) => Int32Array.from({ length: maxCtx + 1 }, (_, i) => -1 - i);

const WEIGHT_DTYPES: readonly DtypeName[] = ["f32", "bf16", "f16"];

/** A weight op's cases: every shape, weight storage type and batch. */
function weightCases(shapes: readonly number[][], make: (shape: number[], w: DtypeName) => BatchSpec): KernelCase[] {
  return shapes.flatMap((shape) =>
    WEIGHT_DTYPES.flatMap((w) => BATCHES.map((B) => batchCase(make(shape, w), B, `weights ${w}`))),
  );
}

const embedSpec = ([T, C]: number[], w: DtypeName): BatchSpec => {
  const V = 257,
    maxCtx = 48;
  return {
    kernel: "embed",
    shape: `T=${T} C=${C}`,
    shared: (seed) => ({
      wte: stored(w, randomFloats(V * C!, seed + 1)),
      wpe: stored(w, randomFloats(maxCtx * C!, seed + 2)),
    }),
    sequence: (b, seed) => ({ seq: tokens(maxCtx, V, seed + b), state: stateAt(positionOf(b, 3, maxCtx - T!)) }),
    outputs: { out: T! * C! },
    run: (be, p, B, code) => be.ops.op_embed(p.out!, p.seq!, p.state!, p.wte!, p.wpe!, B, T!, C!, maxCtx, code(w)),
  };
};

const linearSpec = ([C, OC]: number[], w: DtypeName): BatchSpec => ({
  kernel: "linear",
  shape: `rows=B C=${C} OC=${OC}`,
  shared: (seed) => ({ w: storedMatrix(w, C!, OC!, seed + 6), b: randomFloats(OC!, seed + 7) }),
  sequence: (b, seed) => ({ inp: randomFloats(C!, seed + 5 + 100 * b) }),
  outputs: { out: OC! },
  run: (be, p, B, code) => be.ops.op_linear(p.out!, p.partials!, p.inp!, p.w!, p.b!, B, C!, OC!, code(w)),
});

const layerNorm = (C: number, seed: number) => ({ lnW: randomFloats(C, seed + 1), lnB: randomFloats(C, seed + 2) });

const lnLinearGeluSpec = ([C, OC]: number[], w: DtypeName): BatchSpec => ({
  kernel: "ln_linear_gelu",
  shape: `C=${C} OC=${OC}`,
  shared: (seed) => ({
    ...layerNorm(C!, seed + 50),
    w: storedMatrix(w, C!, OC!, seed + 53),
    b: randomFloats(OC!, seed + 54),
  }),
  sequence: (b, seed) => ({ x: randomFloats(C!, seed + 55 + 100 * b, 3) }),
  outputs: { out: OC! },
  run: (be, p, B, code) =>
    be.ops.op_ln_linear_gelu(p.out!, p.partials!, p.x!, p.lnW!, p.lnB!, p.w!, p.b!, B, C!, OC!, EPS, code(w)),
});

const linearResidualSpec = ([C, OC]: number[], w: DtypeName): BatchSpec => ({
  kernel: "linear_residual",
  shape: `C=${C} OC=${OC}`,
  shared: (seed) => ({ w: storedMatrix(w, C!, OC!, seed + 62), b: randomFloats(OC!, seed + 63) }),
  sequence: (b, seed) => ({ x: randomFloats(OC!, seed + 60 + 100 * b), inp: randomFloats(C!, seed + 61 + 100 * b) }),
  outputs: {},
  updated: ["x"],
  run: (be, p, B, code) => be.ops.op_linear_residual(p.x!, p.partials!, p.inp!, p.w!, p.b!, B, C!, OC!, code(w)),
});

const lmHeadSpec = ([T, C, V]: number[], w: DtypeName): BatchSpec => ({
  kernel: "lm_head",
  shape: `T=${T} C=${C} V=${V}`,
  shared: (seed) => ({ wte: stored(w, randomFloats(V! * C!, seed + 14, 0.1)) }),
  sequence: (b, seed) => ({ inp: randomFloats(T! * C!, seed + 13 + 100 * b) }),
  outputs: { logits: V! },
  run: (be, p, B, code) => be.ops.op_lm_head(p.logits!, p.inp!, p.wte!, B, T!, C!, V!, code(w)),
});

/** Each sequence's token: the rule on the device's own logits (a near-tie may break either way between two summation
 *  orders), written only below max_ctx; every position advanced by T. */
function tokensFollowLogits(
  device: Results,
  sequences: Record<string, Data>[],
  V: number,
  T: number,
  maxCtx: number,
): boolean {
  const logits = device.floats("logits"),
    seq = device.ints("seq"),
    state = device.ints("state");
  return sequences.every((s, b) => {
    const pos = (s.state as Int32Array)[0]!;
    const mine = seq.subarray(b * (maxCtx + 1), (b + 1) * (maxCtx + 1));
    const token = pos + T <= maxCtx ? mine[pos + T] === expectedArgmax(logits.subarray(b * V, (b + 1) * V)) : true;
    const rest = mine.every((t, i) => i === pos + T || t === -1 - i);
    return token && rest && state[b * STATE_INTS] === pos + T;
  });
}

const lnLmHeadArgmaxSpec = ([C, V]: number[], w: DtypeName): BatchSpec => {
  const maxCtx = 16;
  return {
    kernel: "ln_lm_head_argmax",
    shape: `C=${C} V=${V} max_ctx=${maxCtx}`,
    shared: (seed) => ({ ...layerNorm(C!, seed + 70), wte: stored(w, randomFloats(V! * C!, seed + 73, 0.1)) }),
    sequence: (b, seed) => ({
      x: randomFloats(C!, seed + 74 + 100 * b, 3),
      seq: untouched(maxCtx),
      state: stateAt(positionOf(b, 1, maxCtx)),
    }),
    outputs: { logits: V! },
    updated: ["seq", "state"],
    run: (be, p, B, code) =>
      be.ops.op_ln_lm_head_argmax(
        p.logits!,
        p.seq!,
        p.state!,
        p.partials!,
        p.x!,
        p.lnW!,
        p.lnB!,
        p.wte!,
        B,
        C!,
        V!,
        maxCtx,
        EPS,
        code(w),
      ),
    exact: (device, _cpu, sequences) => tokensFollowLogits(device, sequences, V!, 1, maxCtx),
  };
};

/** argmax of B sequences: tokens and positions exactly the twin's and the rule's. */
const argmaxSpec = ([V, T]: number[]): BatchSpec => {
  const maxCtx = 32;
  return {
    kernel: "argmax",
    shape: `V=${V} T=${T} max_ctx=${maxCtx}`,
    shared: () => ({}),
    sequence: (b, seed) => {
      const logits = randomFloats(V!, seed + 15 + 100 * b);
      logits[(b * 37) % V!] = logits[V! - 1 - b] = 2; // a tie: the lower index must win
      return { logits, seq: untouched(maxCtx), state: stateAt(positionOf(b, 2, maxCtx)) };
    },
    outputs: {},
    updated: ["seq", "state"],
    run: (be, p, B) => be.ops.op_argmax(p.seq!, p.state!, p.partials!, p.logits!, B, V!, T!, maxCtx),
    exact: (device, cpu, sequences) => {
      const same = (n: string) => device.ints(n).every((x, i) => x === cpu.ints(n)[i]);
      const rule = sequences.every((s, b) => {
        const pos = (s.state as Int32Array)[0]!;
        return (
          pos + T! > maxCtx ||
          device.ints("seq")[b * (maxCtx + 1) + pos + T!] === expectedArgmax(s.logits as Float32Array)
        );
      });
      return same("seq") && same("state") && rule;
    },
  };
};

// ---- the KV cache ---------------------------------------------------------------------------------------------
const KV_DTYPES: readonly DtypeName[] = ["f32", "bf16", "f16"];

/** A random cache (max_ctx, C) rounded to its storage type. */
const cache = (kv: DtypeName, maxCtx: number, C: number, seed: number) => stored(kv, randomFloats(maxCtx * C, seed));

/** qkv rows (C + 2 kv_C) whose k and v parts are exact in the cache's type, so that a twin caching fp32 caches the same values. */
function qkvRows(T: number, C: number, kvC: number, kv: DtypeName, seed: number): Float32Array {
  const row = C + 2 * kvC;
  const qkv = randomFloats(T * row, seed, 2);
  for (let t = 0; t < T; t++) roundInPlace(kv, qkv.subarray(t * row + C, (t + 1) * row));
  return qkv;
}

/** kv_append then attention for T new rows of each sequence at its own position from `from` on; nKv K/V heads. */
const attentionSpec = ([T, C, nHead, nKv, maxCtx, from = 0]: number[], kv: DtypeName): BatchSpec => {
  const kvC = (C! / nHead!) * nKv!;
  return {
    kernel: "kv_append+attention",
    shape: `T=${T} C=${C} heads=${nHead}/${nKv} max_ctx=${maxCtx}${from ? ` from ${from}` : ""}`,
    shared: () => ({}),
    sequence: (b, seed) => ({
      qkv: qkvRows(T!, C!, kvC, kv, seed + 20 + 100 * b),
      k: cache(kv, maxCtx!, kvC, seed + 21 + 100 * b),
      v: cache(kv, maxCtx!, kvC, seed + 22 + 100 * b),
      state: stateAt(positionOf(b, from + (b === 0 ? 0 : 7), maxCtx! - T!)),
    }),
    outputs: { out: T! * C! },
    updated: ["k", "v"],
    scratch: (be, B) => ({ scratch: be.attentionScratchBytes(B * T!, C!, nHead!, nKv!, maxCtx!) / 4 }),
    run: (be, p, B, code) => {
      be.ops.op_kv_append(p.k!, p.v!, p.qkv!, p.state!, B, T!, C!, kvC, maxCtx!, code(kv));
      be.ops.op_attention(p.out!, p.scratch!, p.qkv!, p.k!, p.v!, p.state!, B, T!, C!, nHead!, nKv!, maxCtx!, code(kv));
    },
    // the cache rows: the twin's values rounded to the cache's type, exactly (src/model/dtypes.ts's rounding)
    exact: (device, cpu) =>
      ["k", "v"].every((n) =>
        sameBytes(device.bytes[n]!, new Uint8Array(encode(kv, roundInPlace(kv, cpu.floats(n).slice())).buffer)),
      ),
  };
};

/** ln_qkv: qkv within the tolerance; the cache rows as cacheRowsFollowQkv (q: C columns, k and v: kv_C). */
const lnQkvSpec = ([C, kvC, maxCtx]: number[], w: DtypeName, kv: DtypeName): BatchSpec => ({
  kernel: "ln_qkv",
  shape: `C=${C} kv_C=${kvC} max_ctx=${maxCtx}`,
  shared: (seed) => ({
    ...layerNorm(C!, seed + 40),
    w: storedMatrix(w, C!, C! + 2 * kvC!, seed + 43),
    b: randomFloats(C! + 2 * kvC!, seed + 44),
  }),
  sequence: (b, seed) => ({
    x: randomFloats(C!, seed + 45 + 100 * b, 3),
    state: stateAt(positionOf(b, 2, maxCtx!)),
    k: cache(kv, maxCtx!, kvC!, seed + 46 + 100 * b),
    v: cache(kv, maxCtx!, kvC!, seed + 47 + 100 * b),
  }),
  outputs: { qkv: C! + 2 * kvC! },
  updated: ["k", "v"],
  run: (be, p, B, code) =>
    be.ops.op_ln_qkv(
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
      B,
      C!,
      kvC!,
      maxCtx!,
      EPS,
      code(w),
      code(kv),
    ),
  exact: (device, _cpu, sequences) => cacheRowsFollowQkv(device, sequences, C!, kvC!, maxCtx!, kv),
});

/** Each sequence's cache rows: row pos_b the device's own k (v) columns of its qkv row rounded to the cache's type
 *  (when below max_ctx), every other row as it was. qkv rows: [q (Q) | k (KV) | v (KV)]. */
function cacheRowsFollowQkv(
  device: Results,
  sequences: Record<string, Data>[],
  Q: number,
  KV: number,
  maxCtx: number,
  kv: DtypeName,
): boolean {
  const qkv = device.floats("qkv"),
    row = Q + 2 * KV;
  return ["k", "v"].every((n, part) => {
    const got = device.floats(n);
    return sequences.every((s, b) => {
      const pos = (s.state as Int32Array)[0]!;
      const want = (s[n] as Stored).values.slice();
      const from = b * row + Q + part * KV;
      if (pos < maxCtx) want.set(roundInPlace(kv, qkv.slice(from, from + KV)), pos * KV);
      const mine = got.subarray(b * maxCtx * KV, (b + 1) * maxCtx * KV);
      return mine.every((x, i) => Object.is(x, want[i]));
    });
  });
}

// ---- the Llama family's fused decode ops
/** rms_qkv_rope: qkv (RMSNorm, q/k/v, the rotation, each head RMS-normalised first where `norms`) within the
 *  tolerance; the cache rows as cacheRowsFollowQkv. The last sequences sit at max_ctx: nothing turned, nothing cached. */
const rmsQkvRopeSpec = ([C, nHead, nKv, hd, maxCtx, norms]: number[], w: DtypeName, kv: DtypeName): BatchSpec => {
  const Q = nHead! * hd!,
    KV = nKv! * hd!,
    OC = Q + 2 * KV;
  return {
    kernel: "rms_qkv_rope",
    shape: `C=${C} heads=${nHead}/${nKv}x${hd} max_ctx=${maxCtx}${norms ? " q/k norms" : ""}`,
    shared: (seed) => ({
      lnW: randomFloats(C!, seed + 90),
      w: storedMatrix(w, C!, OC, seed + 91),
      b: randomFloats(OC, seed + 92),
      rope: ropeTable(maxCtx!, hd!),
      ...(norms ? { qNorm: randomFloats(hd!, seed + 88, 2), kNorm: randomFloats(hd!, seed + 89, 2) } : {}),
    }),
    sequence: (b, seed) => ({
      x: randomFloats(C!, seed + 93 + 100 * b, 3),
      state: stateAt(positionOf(b, 3, maxCtx!)),
      k: cache(kv, maxCtx!, KV, seed + 94 + 100 * b),
      v: cache(kv, maxCtx!, KV, seed + 95 + 100 * b),
    }),
    outputs: { qkv: OC },
    updated: ["k", "v"],
    run: (be, p, B, code) =>
      be.ops.op_rms_qkv_rope(
        p.qkv!,
        p.k!,
        p.v!,
        p.partials!,
        p.x!,
        p.lnW!,
        p.w!,
        p.b!,
        p.state!,
        p.rope!,
        p.qNorm ?? 0,
        p.kNorm ?? 0,
        B,
        C!,
        nHead!,
        nKv!,
        hd!,
        maxCtx!,
        EPS,
        code(w),
        code(kv),
      ),
    exact: (device, _cpu, sequences) => cacheRowsFollowQkv(device, sequences, Q, KV, maxCtx!, kv),
  };
};

const rmsGateUpSpec = ([C, I]: number[], w: DtypeName): BatchSpec => ({
  kernel: "rms_gate_up",
  shape: `C=${C} I=${I}`,
  shared: (seed) => ({
    lnW: randomFloats(C!, seed + 96),
    w: storedMatrix(w, C!, 2 * I!, seed + 97),
    b: randomFloats(2 * I!, seed + 98),
  }),
  sequence: (b, seed) => ({ x: randomFloats(C!, seed + 99 + 100 * b, 3) }),
  outputs: { out: I! },
  run: (be, p, B, code) =>
    be.ops.op_rms_gate_up(p.out!, p.partials!, p.x!, p.lnW!, p.w!, p.b!, B, C!, I!, EPS, code(w)),
});

const rmsLmHeadArgmaxSpec = ([C, V]: number[], w: DtypeName): BatchSpec => {
  const maxCtx = 16;
  return {
    kernel: "rms_lm_head_argmax",
    shape: `C=${C} V=${V} max_ctx=${maxCtx}`,
    shared: (seed) => ({ lnW: randomFloats(C!, seed + 76), wte: stored(w, randomFloats(V! * C!, seed + 77, 0.1)) }),
    sequence: (b, seed) => ({
      x: randomFloats(C!, seed + 78 + 100 * b, 3),
      seq: untouched(maxCtx),
      state: stateAt(positionOf(b, 1, maxCtx)),
    }),
    outputs: { logits: V! },
    updated: ["seq", "state"],
    run: (be, p, B, code) =>
      be.ops.op_rms_lm_head_argmax(
        p.logits!,
        p.seq!,
        p.state!,
        p.partials!,
        p.x!,
        p.lnW!,
        p.wte!,
        B,
        C!,
        V!,
        maxCtx,
        EPS,
        code(w),
      ),
    exact: (device, _cpu, sequences) => tokensFollowLogits(device, sequences, V!, 1, maxCtx),
  };
};

/** fp32 numbers where rounding is delicate: ties both ways, f16's subnormals and overflow, bf16's ties, -0 (no NaN: cuda/dtypes.h). */
export function roundingEdges(): Float32Array {
  // half an ulp of 1 is 2^-11 in f16, 2^-8 in bf16: 1 + that ties down to even, 1 + 3 x that up
  const edges = [
    0,
    -0,
    1,
    -1,
    1 + 2 ** -11,
    1 + 3 * 2 ** -11,
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    1 + 2 ** -8 + 2 ** -20,
    1 - 2 ** -12,
    2 ** -24,
    1.5 * 2 ** -24,
    2 ** -25,
    1.0001 * 2 ** -25,
    3 * 2 ** -26,
    2 ** -14,
    2 ** -14 - 2 ** -25,
    1e-6,
    -3e-8,
    65504,
    65519,
    65520,
    70000,
    -1e5,
    3.4e38,
    1e-40,
    -1e-45,
    Math.PI,
    -Math.E,
  ];
  return Float32Array.from({ length: 64 }, (_, i) => edges[i % edges.length]! * (i < edges.length ? 1 : -1));
}

/** kv_append of edge values: every cache element exactly src/model/dtypes.ts's rounding, on both backends. */
const roundingCases: KernelCase[] = KV_DTYPES.map((kv) => ({
  kernel: "kv_append",
  shape: `C=64, ties, subnormals, overflow and -0 into a ${kv} cache, exactly as src/model/dtypes.ts rounds`,
  run: (pair: Pair) => {
    const C = 64,
      maxCtx = 2;
    const qkv = new Float32Array(3 * C);
    qkv.set(roundingEdges(), C);
    qkv.set(
      roundingEdges().map((x) => -x),
      2 * C,
    );
    const want = [encode(kv, qkv.slice(C, 2 * C)), encode(kv, qkv.slice(2 * C))].map((a) => new Uint8Array(a.buffer));
    return [pair.device, pair.cpu].every((arena) => {
      const k = arena.zeroed(maxCtx * C),
        v = arena.zeroed(maxCtx * C);
      arena.backend.ops.op_kv_append(
        k.ptr,
        v.ptr,
        arena.put(qkv).ptr,
        arena.put(stateAt(1)).ptr,
        1,
        1,
        C,
        C,
        maxCtx,
        DTYPES[kv],
      );
      const rowBytes = C * DTYPE_BYTES[kv];
      const got = [k, v].map((b) => arena.bytes(b).subarray(rowBytes, 2 * rowBytes));
      if (arena === pair.device) for (const [i, g] of got.entries()) pair.note(i ? "v" : "k", asWords(g));
      return got.every((g, i) => sameBytes(g, want[i]!));
    })
      ? 0
      : Infinity;
  },
}));

export const BATCH_DTYPE_CASES: KernelCase[] = [
  ...roundingCases,
  ...weightCases(
    [
      [1, 128],
      [2, 132],
    ],
    embedSpec,
  ),
  ...weightCases(
    [
      [320, 136],
      [96, 101],
    ],
    linearSpec,
  ),
  ...weightCases(
    [
      [320, 264],
      [90, 70],
    ],
    lnLinearGeluSpec,
  ),
  ...weightCases(
    [
      [520, 96],
      [96, 101],
    ],
    linearResidualSpec,
  ),
  // C = 1600: 4 sequences' rows fit the LM head's shared memory (a 4-row kernel reads 4), so 8 take two launches
  ...weightCases(
    [
      [2, 136, 1001],
      [1, 130, 517],
      [1, 1600, 517],
    ],
    lmHeadSpec,
  ),
  ...weightCases(
    [
      [136, 1001],
      [1600, 517],
    ],
    lnLmHeadArgmaxSpec,
  ),
  ...[
    [1001, 1],
    [4096, 2],
  ].flatMap((shape) => BATCHES.map((B) => batchCase(argmaxSpec(shape), B, "fp32 logits"))),
  ...[
    [1, 128, 2, 2, 80],
    [2, 96, 3, 3, 40],
    [1, 90, 3, 3, 24],
    [1, 256, 4, 2, 72], // grouped-query: 2 query heads per K/V head
    [2, 448, 7, 1, 40], // multi-query (Qwen2's 7/1)
    [1, 1024, 16, 2, 300], // 8 query heads per K/V head: the CPU's shared path, 4 at a time
    [2, 512, 4, 1, 70], // head size 128: the merge takes two of a K/V head's query heads at a time
    [1, 1024, 4, 2, 70], // head size 256: the wide kernel, a head merged at a time
    [1, 256, 16, 16, 3000, 2900], // heads of 16 in 17 splits of 2-3 chunks each (the running softmax), at every batch
  ].flatMap((shape) =>
    KV_DTYPES.flatMap((kv) => BATCHES.map((B) => batchCase(attentionSpec(shape, kv), B, `cache ${kv}`))),
  ),
  ...(
    [
      ["f32", "f32"],
      ["bf16", "bf16"],
      ["f16", "f16"],
      ["f32", "bf16"],
    ] as const
  ).flatMap(([w, kv]) =>
    [
      [264, 264, 24],
      [90, 90, 16],
      [256, 64, 24], // grouped-query: 8 heads of 32 sharing 2
      [264, 66, 16], // multi-query (4 heads of 66): kv_C not a multiple of 4, the scalar variant
    ].flatMap((shape) => BATCHES.map((B) => batchCase(lnQkvSpec(shape, w, kv), B, `weights ${w}, cache ${kv}`))),
  ),
  ...(
    [
      ["f32", "f32"],
      ["bf16", "bf16"],
      ["f16", "f16"],
      ["f32", "bf16"],
    ] as const
  ).flatMap(([w, kv]) =>
    [
      [256, 4, 2, 64, 24], // GQA 2 query heads per K/V head (f32 and bf16 tiles each hold whole halves)
      [136, 2, 1, 16, 16], // head_dim 16: the scalar variant (tiles of 8 columns)
      [192, 2, 2, 96, 32], // head_dim 96: bf16's 64-column tiles do not fit, the scalar variant
      [256, 4, 2, 128, 24, 1], // q/k norms: a head over 4 f32 tiles (2 of bf16) meets in its last tile
      [136, 2, 1, 16, 16, 1], // q/k norms in the scalar variant: 2 tiles of 8 columns per head
    ].flatMap((shape) => BATCHES.map((B) => batchCase(rmsQkvRopeSpec(shape, w, kv), B, `weights ${w}, cache ${kv}`))),
  ),
  ...weightCases(
    [
      [256, 128],
      [96, 36], // 2I = 72: the scalar variant
    ],
    rmsGateUpSpec,
  ),
  ...weightCases(
    [
      [136, 1001],
      [1600, 517],
    ],
    rmsLmHeadArgmaxSpec,
  ),
];
