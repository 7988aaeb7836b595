/** GPT-2 weights in float32: loaded from a Hugging Face checkpoint or GPT-2-initialised from a seed. */
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UserError } from "../errors.ts";
import { hfConfigOf, readHFConfig, type GPT2Config } from "./config.ts";
import { formatShape, numel, readSafetensors, tensorFloat32, writeSafetensors, type F32Tensor, type SafetensorsFile, type TensorInfo } from "./safetensors.ts";

/** y = x · weight + bias, Conv1D layout: weight (C, OC) input-first, bias (OC). */
export interface Linear {
  weight: Float32Array;
  bias: Float32Array;
}

/** LayerNorm affine parameters, each (C). */
export interface Norm {
  weight: Float32Array;
  bias: Float32Array;
}

export interface Layer {
  ln_1: Norm;
  attn: { c_attn: Linear /* (C, 3C) */; c_proj: Linear /* (C, C) */ };
  ln_2: Norm;
  mlp: { c_fc: Linear /* (C, 4C) */; c_proj: Linear /* (4C, C) */ };
}

export interface GPT2Weights {
  config: GPT2Config;
  wte: Float32Array; // (V, C), also the tied output projection
  wpe: Float32Array; // (n_positions, C)
  layers: Layer[];
  ln_f: Norm;
  source: string; // "random (seed N)" or the safetensors path
  skipped: { tensors: number; bytes: number; names: string[] }; // mask buffers and a tied lm_head, not loaded
}

type Init = "normal" | "zeros" | "ones";
/** Supplies the tensor called `name` (HF naming, no prefix) of `shape`; `init` says how a fresh one starts. */
type TensorSource = (name: string, shape: number[], init: Init) => Float32Array;
type Parameters = Pick<GPT2Weights, "wte" | "wpe" | "layers" | "ln_f">;

/** Builds the parameter tree, asking `get` for each tensor in checkpoint order. */
function assemble(cfg: GPT2Config, get: TensorSource): Parameters {
  const C = cfg.n_embd;
  const norm = (p: string): Norm => ({ weight: get(`${p}.weight`, [C], "ones"), bias: get(`${p}.bias`, [C], "zeros") });
  const linear = (p: string, inC: number, outC: number): Linear => ({
    weight: get(`${p}.weight`, [inC, outC], "normal"),
    bias: get(`${p}.bias`, [outC], "zeros"),
  });
  const wte = get("wte.weight", [cfg.vocab_size, C], "normal");
  const wpe = get("wpe.weight", [cfg.n_positions, C], "normal");
  const layers = Array.from({ length: cfg.n_layer }, (_, i): Layer => ({
    ln_1: norm(`h.${i}.ln_1`),
    attn: { c_attn: linear(`h.${i}.attn.c_attn`, C, 3 * C), c_proj: linear(`h.${i}.attn.c_proj`, C, C) },
    ln_2: norm(`h.${i}.ln_2`),
    mlp: { c_fc: linear(`h.${i}.mlp.c_fc`, C, 4 * C), c_proj: linear(`h.${i}.mlp.c_proj`, 4 * C, C) },
  }));
  return { wte, wpe, layers, ln_f: norm("ln_f") };
}

/** Every parameter as [HF name, data], in checkpoint order; the tied output projection is wte and not repeated. */
export function* weightTensors(w: GPT2Weights): Generator<[string, Float32Array]> {
  yield ["wte.weight", w.wte];
  yield ["wpe.weight", w.wpe];
  for (const [i, l] of w.layers.entries()) {
    yield* affine(`h.${i}.ln_1`, l.ln_1);
    yield* affine(`h.${i}.attn.c_attn`, l.attn.c_attn);
    yield* affine(`h.${i}.attn.c_proj`, l.attn.c_proj);
    yield* affine(`h.${i}.ln_2`, l.ln_2);
    yield* affine(`h.${i}.mlp.c_fc`, l.mlp.c_fc);
    yield* affine(`h.${i}.mlp.c_proj`, l.mlp.c_proj);
  }
  yield* affine("ln_f", w.ln_f);
}

function* affine(prefix: string, p: Linear | Norm): Generator<[string, Float32Array]> {
  yield [`${prefix}.weight`, p.weight];
  yield [`${prefix}.bias`, p.bias];
}

// ---------------------------------------------------------------------------------------------
// Loading a checkpoint

const PREFIX = "transformer.";
/** Per-layer causal-mask buffers carried by HF checkpoints; not parameters. */
const MASK_BUFFER = /^h\.\d+\.attn\.(bias|masked_bias)$/;
/** Errors list at most this many tensors before "and N more". */
const LIST_LIMIT = 4;

/** Loads `dir/config.json` + `dir/model.safetensors`, checking every tensor against the config. */
export function loadModel(dir: string): GPT2Weights {
  if (!existsSync(dir)) throw new UserError(`model directory not found: ${dir}`);
  if (!statSync(dir).isDirectory()) throw new UserError(`--model takes a directory (with config.json and model.safetensors), not a file: ${dir}`);
  const config = readHFConfig(dir);
  const path = join(dir, "model.safetensors");
  if (!existsSync(path)) throw new UserError(`no model.safetensors in ${dir} (expected config.json + model.safetensors)`);
  const file = readSafetensors(path);
  const tensors = unprefixed(file);

  const used = new Set<string>();
  const problems: string[] = [];
  const params = assemble(config, (name, shape) => {
    used.add(name);
    const t = tensors.get(name);
    if (!t) problems.push(`${name} is missing (expected ${formatShape(shape)})`);
    else if (!sameShape(t.shape, shape)) problems.push(`${name} has shape ${formatShape(t.shape)}, expected ${formatShape(shape)}`);
    else return tensorFloat32(file, t);
    return new Float32Array(0);
  });
  if (problems.length) throw new UserError(`${path}: ${listSome(problems, "; ")} (config: ${join(dir, "config.json")})`);

  const skippedInfos = [...tensors.values()].filter((t) => isSkippable(t.name));
  const extras = [...tensors.keys()].filter((n) => !used.has(n) && !isSkippable(n));
  if (extras.length) throw new UserError(`${path}: unexpected tensors ${listSome(extras, ", ")}`);
  const lmHead = tensors.get("lm_head.weight");
  if (lmHead) checkTied(file, lmHead, params.wte, config);

  return {
    config,
    ...params,
    source: path,
    skipped: {
      tensors: skippedInfos.length,
      bytes: skippedInfos.reduce((sum, t) => sum + (t.end - t.begin), 0),
      names: skippedInfos.map((t) => t.name),
    },
  };
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
    if (out.has(name)) throw new UserError(`${file.path}: tensor ${name} appears both with and without the "${PREFIX}" prefix`);
    out.set(name, { ...t, name });
  }
  return out;
}

/** A separate lm_head.weight is accepted only as an exact copy of wte (GPT-2 ties them). */
function checkTied(file: SafetensorsFile, lmHead: TensorInfo, wte: Float32Array, config: GPT2Config): void {
  const expected = [config.vocab_size, config.n_embd];
  if (!sameShape(lmHead.shape, expected)) {
    throw new UserError(`${file.path}: lm_head.weight has shape ${formatShape(lmHead.shape)}, expected ${formatShape(expected)} (tied to wte)`);
  }
  const head = tensorFloat32(file, lmHead);
  for (let i = 0; i < head.length; i++) {
    if (head[i] !== wte[i]) {
      throw new UserError(`${file.path}: lm_head.weight differs from wte.weight; untied output embeddings are not supported`);
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

/** Writes `w` as a Hugging Face checkpoint directory (config.json + model.safetensors, F32) that loadModel reads back. */
export function saveModel(w: GPT2Weights, dir: string): void {
  const data = new Map(weightTensors(w));
  const tensors: F32Tensor[] = [];
  assemble(w.config, (name, shape) => {
    tensors.push({ name, shape, data: data.get(name)! });
    return data.get(name)!;
  });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(hfConfigOf(w.config), null, 2)}\n`);
  writeSafetensors(join(dir, "model.safetensors"), tensors);
}

// ---------------------------------------------------------------------------------------------
// Random initialisation

/** GPT-2's initialisation, deterministic in `seed`: N(0, 0.02) weights and embeddings, zero biases, LayerNorm 1 / 0. */
export function randomWeights(config: GPT2Config, seed = 0): GPT2Weights {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new UserError(`seed must be a non-negative integer, got ${seed}`);
  const rng = new Xoshiro128ss(seed);
  const params = assemble(config, (_name, shape, init) => {
    const a = new Float32Array(numel(shape));
    if (init === "ones") a.fill(1);
    else if (init === "normal") rng.fillNormal(a, 0.02);
    return a;
  });
  return { config, ...params, source: `random (seed ${seed})`, skipped: { tensors: 0, bytes: 0, names: [] } };
}

/** xoshiro128** (Blackman & Vigna), seeded through splitmix32. */
class Xoshiro128ss {
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
  const k = new Float64Array(128), w = new Float64Array(128), f = new Float64Array(128);
  const density = (x: number) => Math.exp(-0.5 * x * x);
  let dn = ZIGGURAT_R, tn = dn;
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
