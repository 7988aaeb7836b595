/**
 * GPT-2 weights, streamed: loaded from a Hugging Face checkpoint or GPT-2-initialised from a seed. Neither
 * holds the model in JS memory: `stream` hands out each parameter in float32 chunks through one reusable
 * buffer, to be uploaded to a backend as it comes. Only tests and verification references materialise
 * the arrays (`materializeWeights`).
 */
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UserError } from "../errors.ts";
import type { DtypeName } from "../ops.ts";
import { hfConfigOf, readHFConfig, type GPT2Config } from "./config.ts";
import {
  CHUNK_ELEMENTS,
  formatShape,
  nameOf,
  numel,
  readChunk,
  readSafetensors,
  Staging,
  streamTensor,
  WEIGHT_DTYPES,
  writeSafetensors,
  type ByteSource,
  type SafetensorsFile,
  type TensorInfo,
} from "./safetensors.ts";

type Init = "normal" | "zeros" | "ones";

/** One parameter: its Hugging Face name (no prefix), shape, and how a fresh one starts. */
export interface ParameterSpec {
  name: string;
  shape: number[];
  init: Init;
  /** a linear layer's weight, input-first (in, out): a backend holds it in its own layout (Backend.uploadMatrix) */
  linear?: boolean;
}

/** Receives elements [offset, offset + chunk.length) of parameter `spec`; the chunk is reused after it returns. */
export type ChunkVisitor = (spec: ParameterSpec, chunk: Float32Array, offset: number) => void;

export interface GPT2Weights {
  config: GPT2Config;
  source: string; // "random (seed N)" or the safetensors path
  /** the storage type of the source's matrices: a BF16 or F16 checkpoint's, else f32 (the default --dtype) */
  storedAs: DtypeName;
  skipped: { tensors: number; bytes: number; names: string[] }; // mask buffers and a tied lm_head, not loaded
  /**
   * Every parameter of `parameterSpecs(config)`, in that order, whole, as float32 chunks. A checkpoint's
   * data is checked as it streams (finite values, a tied lm_head equal to wte): problems are UserErrors.
   */
  stream(visit: ChunkVisitor): void;
}

/**
 * Every parameter in checkpoint order; the tied output projection is wte and not repeated.
 * Linear weights use the Conv1D layout (C, OC) input-first; LayerNorm weight and bias are (C).
 */
export function parameterSpecs(cfg: GPT2Config): ParameterSpec[] {
  const C = cfg.n_embd;
  const specs: ParameterSpec[] = [];
  const add = (name: string, shape: number[], init: Init, linear = false) =>
    specs.push({ name, shape, init, ...(linear && { linear }) });
  const norm = (p: string) => {
    add(`${p}.weight`, [C], "ones");
    add(`${p}.bias`, [C], "zeros");
  };
  const linear = (p: string, inC: number, outC: number) => {
    add(`${p}.weight`, [inC, outC], "normal", true);
    add(`${p}.bias`, [outC], "zeros");
  };
  add("wte.weight", [cfg.vocab_size, C], "normal");
  add("wpe.weight", [cfg.n_positions, C], "normal");
  for (let i = 0; i < cfg.n_layer; i++) {
    norm(`h.${i}.ln_1`);
    linear(`h.${i}.attn.c_attn`, C, 3 * C);
    linear(`h.${i}.attn.c_proj`, C, C);
    norm(`h.${i}.ln_2`);
    linear(`h.${i}.mlp.c_fc`, C, 4 * C);
    linear(`h.${i}.mlp.c_proj`, 4 * C, C);
  }
  norm("ln_f");
  return specs;
}

/**
 * The parameters as JS arrays, keyed by name in checkpoint order: a full copy of the model, for float64
 * references in tests and checks. The commands never call it.
 */
export function materializeWeights(w: GPT2Weights): Map<string, Float32Array> {
  const arrays = new Map(parameterSpecs(w.config).map((s) => [s.name, new Float32Array(numel(s.shape))]));
  w.stream((spec, chunk, offset) => arrays.get(spec.name)!.set(chunk, offset));
  return arrays;
}

/**
 * Writes `w` as a Hugging Face checkpoint directory (config.json + model.safetensors, F32) that loadModel reads
 * back: the parameters stream from `w` straight into the file.
 */
export function saveModel(w: GPT2Weights, dir: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(hfConfigOf(w.config), null, 2)}\n`);
  writeSafetensors(join(dir, "model.safetensors"), parameterSpecs(w.config), (emit) =>
    w.stream((_spec, chunk) => emit(chunk)),
  );
}

// ---------------------------------------------------------------------------------------------
// Loading a checkpoint

const PREFIX = "transformer.";
/** Per-layer causal-mask buffers carried by HF checkpoints; not parameters. */
const MASK_BUFFER = /^h\.\d+\.attn\.(bias|masked_bias)$/;
/** Errors list at most this many tensors before "and N more". */
const LIST_LIMIT = 4;

/**
 * Opens `dir/config.json` + `dir/model.safetensors` and checks every tensor's name, shape and dtype against
 * the config; the data is read (and checked) when the weights are streamed onto a backend.
 */
export function loadModel(dir: string): GPT2Weights {
  if (!existsSync(dir)) throw new UserError(`model directory not found: ${dir}`);
  if (!statSync(dir).isDirectory())
    throw new UserError(`--model takes a directory (with config.json and model.safetensors), not a file: ${dir}`);
  const config = readHFConfig(dir);
  const path = join(dir, "model.safetensors");
  if (!existsSync(path))
    throw new UserError(`no model.safetensors in ${dir} (expected config.json + model.safetensors)`);
  const file = readSafetensors(path);
  const tensors = unprefixed(file);

  const specs = parameterSpecs(config);
  const problems: string[] = [];
  for (const { name, shape } of specs) {
    const t = tensors.get(name);
    if (!t) problems.push(`${name} is missing (expected ${formatShape(shape)})`);
    else if (!sameShape(t.shape, shape))
      problems.push(`${nameOf(name)} has shape ${formatShape(t.shape)}, expected ${formatShape(shape)}`);
  }
  if (problems.length)
    throw new UserError(`${path}: ${listSome(problems, "; ")} (config: ${join(dir, "config.json")})`);

  const used = new Set(specs.map((s) => s.name));
  const skippedInfos = [...tensors.values()].filter((t) => isSkippable(t.name));
  const extras = [...tensors.keys()].filter((n) => !used.has(n) && !isSkippable(n));
  if (extras.length) throw new UserError(`${path}: unexpected tensors ${listSome(extras.map(nameOf), ", ")}`);
  for (const { name } of specs) {
    const t = tensors.get(name)!;
    if (!WEIGHT_DTYPES.has(t.dtype))
      throw new UserError(`${path}: tensor ${nameOf(name)} has dtype ${t.dtype}; weights must be F32, F16 or BF16`);
  }
  const lmHead = tensors.get("lm_head.weight");
  if (lmHead) checkTiedShape(file, lmHead, config);

  return {
    config,
    source: path,
    storedAs: checkpointDtype(specs.filter((s) => s.shape.length === 2).map((s) => tensors.get(s.name)!.dtype)),
    skipped: {
      tensors: skippedInfos.length,
      bytes: skippedInfos.reduce((sum, t) => sum + (t.end - t.begin), 0),
      names: skippedInfos.map((t) => t.name),
    },
    stream: (visit) => streamCheckpoint(file, tensors, specs, lmHead, visit),
  };
}

/** Streams the parameters from the file in spec order; a separate lm_head is compared with wte as wte streams. */
function streamCheckpoint(
  file: SafetensorsFile,
  tensors: Map<string, TensorInfo>,
  specs: ParameterSpec[],
  lmHead: TensorInfo | undefined,
  visit: ChunkVisitor,
): void {
  const source = file.open();
  const staging = new Staging();
  const headStaging = lmHead ? new Staging() : null;
  try {
    for (const spec of specs) {
      streamTensor(file, source, tensors.get(spec.name)!, staging, (chunk, offset) => {
        if (spec.name === "wte.weight" && lmHead) checkTiedChunk(file, source, lmHead, headStaging!, chunk, offset);
        visit(spec, chunk, offset);
      });
    }
  } finally {
    source.close();
  }
}

/** The checkpoint's matrices' storage type when they all share BF16 or F16 (weights then load without widening), else f32. */
function checkpointDtype(dtypes: string[]): DtypeName {
  const one = new Set(dtypes);
  if (one.size !== 1) return "f32";
  const only = [...one][0];
  return only === "BF16" ? "bf16" : only === "F16" ? "f16" : "f32";
}

/** Mask buffers and lm_head.weight (checked to equal wte) are present in checkpoints but not loaded. */
function isSkippable(name: string): boolean {
  return MASK_BUFFER.test(name) || name === "lm_head.weight";
}

/** The file's tensors keyed by name without the `transformer.` prefix (HF's GPT2LMHeadModel layout). */
function unprefixed(file: SafetensorsFile): Map<string, TensorInfo> {
  const out = new Map<string, TensorInfo>();
  for (const t of file.tensors.values()) {
    const name = t.name.startsWith(PREFIX) ? t.name.slice(PREFIX.length) : t.name;
    if (out.has(name))
      throw new UserError(`${file.path}: tensor ${nameOf(name)} appears both with and without the "${PREFIX}" prefix`);
    out.set(name, { ...t, name });
  }
  return out;
}

/** A separate lm_head.weight is accepted only as an exact copy of wte (GPT-2 ties them): first its shape and dtype. */
function checkTiedShape(file: SafetensorsFile, lmHead: TensorInfo, config: GPT2Config): void {
  const expected = [config.vocab_size, config.n_embd];
  if (!sameShape(lmHead.shape, expected)) {
    throw new UserError(
      `${file.path}: lm_head.weight has shape ${formatShape(lmHead.shape)}, expected ${formatShape(expected)} (tied to wte)`,
    );
  }
  if (!WEIGHT_DTYPES.has(lmHead.dtype)) {
    throw new UserError(
      `${file.path}: tensor lm_head.weight has dtype ${lmHead.dtype}; weights must be F32, F16 or BF16`,
    );
  }
}

/** …then its values, chunk by chunk beside wte's. */
function checkTiedChunk(
  file: SafetensorsFile,
  source: ByteSource,
  lmHead: TensorInfo,
  staging: Staging,
  wte: Float32Array,
  offset: number,
): void {
  const head = readChunk(file, source, lmHead, staging, offset, wte.length);
  for (let i = 0; i < wte.length; i++) {
    if (head[i] !== wte[i]) {
      throw new UserError(
        `${file.path}: lm_head.weight differs from wte.weight; untied output embeddings are not supported`,
      );
    }
  }
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function listSome(items: string[], sep: string): string {
  const more = items.length - LIST_LIMIT;
  return items.slice(0, LIST_LIMIT).join(sep) + (more > 0 ? ` (and ${more} more)` : "");
}

// ---------------------------------------------------------------------------------------------
// Random initialisation

/**
 * GPT-2's initialisation, deterministic in `seed`: N(0, 0.02) weights and embeddings, zero biases, LayerNorm 1 / 0.
 * Generated chunk by chunk as it streams (the same values every time: one generator, in spec order).
 */
export function randomWeights(config: GPT2Config, seed = 0): GPT2Weights {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new UserError(`seed must be a non-negative integer, got ${seed}`);
  return {
    config,
    source: `random (seed ${seed})`,
    storedAs: "f32",
    skipped: { tensors: 0, bytes: 0, names: [] },
    stream: (visit) => streamSeeded(parameterSpecs(config), seed, visit),
  };
}

/**
 * Streams `specs` initialised as each says (N(0, 0.02), ones, zeros), chunk by chunk from one generator seeded with
 * `seed`, in order: the same values every time.
 */
export function streamSeeded(specs: readonly ParameterSpec[], seed: number, visit: ChunkVisitor): void {
  const rng = new Xoshiro128ss(seed);
  const staging = new Float32Array(CHUNK_ELEMENTS);
  for (const spec of specs) {
    const n = numel(spec.shape);
    for (let offset = 0; offset < n; offset += CHUNK_ELEMENTS) {
      const chunk = staging.subarray(0, Math.min(CHUNK_ELEMENTS, n - offset));
      if (spec.init === "normal") rng.fillNormal(chunk, 0.02);
      else chunk.fill(spec.init === "ones" ? 1 : 0);
      visit(spec, chunk, offset);
    }
  }
}

/** out: (cols, rows) = a: (rows, cols) transposed */
export function transposed(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}

/** xoshiro128** (Blackman & Vigna), seeded through splitmix32. */
export class Xoshiro128ss {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    let x = (seed >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32), 0x9e3779b9);
    const splitmix32 = (): number => {
      x = (x + 0x9e3779b9) | 0;
      let z = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return z ^ (z >>> 16);
    };
    [this.s0, this.s1, this.s2, this.s3] = [splitmix32(), splitmix32(), splitmix32(), splitmix32()];
  }

  /** 32 random bits as a signed int32. */
  nextInt32(): number {
    const r = Math.imul(this.s1, 5);
    const result = Math.imul((r << 7) | (r >>> 25), 9);
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = (this.s3 << 11) | (this.s3 >>> 21);
    return result;
  }

  /** Uniform in (0, 1). */
  nextOpenUnit(): number {
    return ((this.nextInt32() >>> 0) + 0.5) / 2 ** 32;
  }

  /** Fills `out` with N(0, std) samples. */
  fillNormal(out: Float32Array, std: number): void {
    for (let i = 0; i < out.length; i++) out[i] = std * this.normal();
  }

  /**
   * A standard normal sample by Marsaglia & Tsang's ziggurat (128 layers): one 32-bit draw and a table compare
   * in ~99% of cases. Low 7 bits pick the layer, the high 25 bits (signed) the position in it.
   */
  private normal(): number {
    const z = ZIGGURAT;
    for (;;) {
      const u = this.nextInt32();
      const layer = u & 127;
      const j = u >> 7; // in [-2^24, 2^24)
      const x = j * z.w[layer]!;
      if (Math.abs(j) < z.k[layer]!) return x; // inside the layer's rectangle core
      if (layer === 0) return this.tail(j < 0);
      const y = z.f[layer]! + this.nextOpenUnit() * (z.f[layer - 1]! - z.f[layer]!);
      if (y < Math.exp(-0.5 * x * x)) return x; // under the density in the wedge
    }
  }

  /** A sample from the tail beyond ±R (Marsaglia's exponential method). */
  private tail(negative: boolean): number {
    let x: number, y: number;
    do {
      x = -Math.log(this.nextOpenUnit()) / ZIGGURAT_R;
      y = -Math.log(this.nextOpenUnit());
    } while (y + y < x * x);
    return negative ? -(ZIGGURAT_R + x) : ZIGGURAT_R + x;
  }
}

/** Right edge of the base layer and the common layer area of the 128-layer normal ziggurat. */
const ZIGGURAT_R = 3.442619855899;
const ZIGGURAT_V = 9.91256303526217e-3;

/** Layer tables for 25-bit signed positions: k acceptance bounds, w position→x scale, f density at each layer edge. */
const ZIGGURAT = ((): { k: Float64Array; w: Float64Array; f: Float64Array } => {
  const m = 2 ** 24;
  const k = new Float64Array(128),
    w = new Float64Array(128),
    f = new Float64Array(128);
  const density = (x: number) => Math.exp(-0.5 * x * x);
  let dn = ZIGGURAT_R,
    tn = dn;
  const q = ZIGGURAT_V / density(dn);
  k[0] = (dn / q) * m;
  k[1] = 0;
  w[0] = q / m;
  w[127] = dn / m;
  f[0] = 1;
  f[127] = density(dn);
  for (let i = 126; i >= 1; i--) {
    dn = Math.sqrt(-2 * Math.log(ZIGGURAT_V / dn + density(dn)));
    k[i + 1] = (dn / tn) * m;
    tn = dn;
    f[i] = density(dn);
    w[i] = dn / m;
  }
  return { k, w, f };
})();
