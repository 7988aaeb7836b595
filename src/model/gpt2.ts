// GPT-2 as one of the architectures (architectures.ts): its config keys, its checkpoint's tensor names and the
// project's layout of them (Conv1D linears, input-first), its loader and seeded weights, its presets and its row.
// Its weights are streamed: loaded from a Hugging Face checkpoint or GPT-2-initialised from a seed, neither held in
// JS memory — `stream` hands out each parameter in float32 chunks through one reusable buffer, to be uploaded to a
// backend as it comes. Only tests and verification references materialise the arrays (`materializeWeights`).
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { UserError } from "../errors.ts";
import type { DtypeName } from "../ops.ts";
import type { ModelFamily } from "./family.ts";
import { parseJsonObject } from "./files.ts";
import { streamSeeded, type ChunkVisitor, type Init, type ParameterSpec } from "./parameters.ts";
import {
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

// ---------------------------------------------------------------------------------------------
// Config

export interface GPT2Config {
  name: string;
  n_layer: number;
  n_head: number;
  /**
   * K/V heads, each shared by n_head / n_kv_head query heads, where profile --kv-heads reshaped the attention;
   * absent: one per query head, as in every GPT-2 checkpoint
   */
  n_kv_head?: number;
  n_embd: number; // C
  n_positions: number; // maximum sequence length T
  vocab_size: number; // V
  layer_norm_epsilon: number;
}

function preset(name: string, n_layer: number, n_head: number, n_embd: number): GPT2Config {
  return { name, n_layer, n_head, n_embd, n_positions: 1024, vocab_size: 50257, layer_norm_epsilon: 1e-5 };
}

/** The released OpenAI GPT-2 sizes. */
export const PRESETS: Readonly<Record<string, GPT2Config>> = {
  gpt2: preset("gpt2", 12, 12, 768), // 124M
  "gpt2-medium": preset("gpt2-medium", 24, 16, 1024), // 355M
  "gpt2-large": preset("gpt2-large", 36, 20, 1280), // 774M
  "gpt2-xl": preset("gpt2-xl", 48, 25, 1600), // 1558M
};

/** Activations that are GPT-2's tanh-approximated GELU (what the kernels implement). */
const TANH_GELU = new Set(["gelu_new", "gelu_pytorch_tanh"]);

/** Reads and validates a Hugging Face GPT-2 `config.json` in `dir`. */
export function readHFConfig(dir: string): GPT2Config {
  const path = join(dir, "config.json");
  if (!existsSync(path))
    throw new UserError(`no config.json in ${dir} (expected a Hugging Face GPT-2 checkpoint directory)`);
  const raw = parseJsonObject(path);
  checkSupported(raw, path);
  const int = (key: string) => positiveInteger(raw, key, path);
  const n_positions = raw.n_positions !== undefined ? int("n_positions") : int("n_ctx");
  const cfg: GPT2Config = {
    name: basename(resolve(dir)),
    n_layer: int("n_layer"),
    n_head: int("n_head"),
    n_embd: int("n_embd"),
    n_positions,
    vocab_size: int("vocab_size"),
    layer_norm_epsilon: epsilon(raw, path),
  };
  if (cfg.n_embd % cfg.n_head !== 0) {
    throw new UserError(`${path}: n_embd ${cfg.n_embd} is not divisible by n_head ${cfg.n_head}`);
  }
  if (raw.n_inner !== undefined && raw.n_inner !== null && raw.n_inner !== 4 * cfg.n_embd) {
    throw new UserError(
      `${path}: n_inner ${JSON.stringify(raw.n_inner)} is not supported (the MLP must be 4 × n_embd)`,
    );
  }
  return cfg;
}

/** The Hugging Face config.json of a GPT-2 config (what readHFConfig reads back). */
export function hfConfigOf(cfg: GPT2Config): Record<string, unknown> {
  checkOneKvHeadPerQueryHead(cfg, "a Hugging Face checkpoint");
  return {
    architectures: ["GPT2LMHeadModel"],
    model_type: "gpt2",
    n_layer: cfg.n_layer,
    n_head: cfg.n_head,
    n_embd: cfg.n_embd,
    n_positions: cfg.n_positions,
    n_ctx: cfg.n_positions,
    vocab_size: cfg.vocab_size,
    layer_norm_epsilon: cfg.layer_norm_epsilon,
    activation_function: "gelu_new",
    tie_word_embeddings: true,
  };
}

/**
 * Refuses to write `what` (a checkpoint, a peer's file) of a config whose attention profile --kv-heads reshaped:
 * GPT-2's checkpoints, and the peers that read them, hold one K/V head per query head.
 */
export function checkOneKvHeadPerQueryHead(cfg: GPT2Config, what: string): void {
  if (kvHeads(cfg) !== cfg.n_head)
    throw new UserError(
      `${cfg.name} reshaped to ${kvHeads(cfg)} K/V heads of ${cfg.n_head} has no form as ${what}: GPT-2's c_attn holds one K/V head per query head there`,
    );
}

/** Rejects GPT-2 variants whose forward pass differs from the one implemented here. */
function checkSupported(raw: Record<string, unknown>, path: string): void {
  if (raw.model_type !== undefined && raw.model_type !== "gpt2") {
    throw new UserError(`${path}: model_type is ${JSON.stringify(raw.model_type)}, only "gpt2" is supported`);
  }
  const act = raw.activation_function;
  if (act !== undefined && !(typeof act === "string" && TANH_GELU.has(act))) {
    throw new UserError(
      `${path}: activation_function ${JSON.stringify(act)} is not supported (only gelu_new / gelu_pytorch_tanh)`,
    );
  }
  if (raw.tie_word_embeddings === false) {
    throw new UserError(
      `${path}: tie_word_embeddings is false; only tied output embeddings (lm_head = wte) are supported`,
    );
  }
}

function positiveInteger(raw: Record<string, unknown>, key: string, path: string): number {
  const v = raw[key];
  if (v === undefined) throw new UserError(`${path}: missing ${key}`);
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) {
    throw new UserError(`${path}: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** layer_norm_epsilon, defaulting to 1e-5 as Hugging Face's GPT2Config does. */
function epsilon(raw: Record<string, unknown>, path: string): number {
  const v = raw.layer_norm_epsilon ?? 1e-5;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new UserError(`${path}: layer_norm_epsilon must be a positive number, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** hs = C / nh */
export function headSize(cfg: GPT2Config): number {
  return cfg.n_embd / cfg.n_head;
}

/** K/V heads: n_kv_head, else one per query head. */
export const kvHeads = (cfg: GPT2Config): number => cfg.n_kv_head ?? cfg.n_head;

/** kv_C = K/V heads × hs: the k (and v) columns of c_attn's output and of a cache row (C without a reshape). */
export const kvWidth = (cfg: GPT2Config): number => kvHeads(cfg) * headSize(cfg);

/** Exact parameter count; the output projection is tied to wte and counted once. */
export function parameterCount(cfg: GPT2Config): number {
  const C = cfg.n_embd,
    QKV = C + 2 * kvWidth(cfg);
  const embeddings = (cfg.vocab_size + cfg.n_positions) * C; // wte (V, C) + wpe (T, C)
  // ln_1, ln_2: 2 × 2C; c_attn: C·QKV + QKV; attn c_proj: C·C + C; c_fc: C·4C + 4C; mlp c_proj: 4C·C + C
  const perLayer = (C + 1) * QKV + 9 * C * C + 10 * C;
  return embeddings + cfg.n_layer * perLayer + 2 * C; // + ln_f
}

export function weightBytes(cfg: GPT2Config, bytesPerElement = 4): number {
  return parameterCount(cfg) * bytesPerElement;
}

/** K and V, each (n_layer, kv_C) per token. */
export function kvCacheBytesPerToken(cfg: GPT2Config, bytesPerElement = 4): number {
  return 2 * cfg.n_layer * kvWidth(cfg) * bytesPerElement;
}

// ---------------------------------------------------------------------------------------------
// Parameters and checkpoints

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
    linear(`h.${i}.attn.c_attn`, C, C + 2 * kvWidth(cfg)); // [q (C) | k (kv_C) | v (kv_C)]
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
  const config = hfConfigOf(w.config);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(config, null, 2)}\n`);
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

// ---------------------------------------------------------------------------------------------
// The family's row in the registry (architectures.ts)

export const GPT2_FAMILY: ModelFamily<GPT2Config, GPT2Weights> = {
  architectures: { GPT2LMHeadModel: "gpt2" },
  shapeFamily: "gpt2",
  rotary: false,
  presets: PRESETS,
  owns: (cfg) => "layer_norm_epsilon" in cfg, // its LayerNorm's key: a config of its own, not "anything but Llama"
  modelType: () => "gpt2",
  configOf: (_raw, _modelType, _path, dir) => readHFConfig(dir),
  load: (dir) => loadModel(dir),
  randomWeights,
  save: saveModel,
  parameterCount,
  parametersHow: () =>
    "exact for GPT-2: embeddings (vocab + positions) × n_embd, 12·C² + 13·C per block (less where the attention is reshaped to fewer K/V heads, profile --kv-heads, narrowing c_attn's k and v), final LayerNorm; the output head is tied to the embeddings",
  headDim: headSize,
  positionsLimit: (cfg) => `n_positions ${cfg.n_positions}`,
  kvHeads,
  withKvHeads: (cfg, n_kv_head) => ({ ...cfg, n_kv_head }),
  placedParameters: parameterSpecs,
  linears: (cfg) => {
    const C = cfg.n_embd;
    return [
      ["c_attn", C, C + 2 * kvWidth(cfg)],
      ["attn.c_proj", C, C],
      ["c_fc", C, 4 * C],
      ["mlp.c_proj", 4 * C, C],
    ];
  },
};
