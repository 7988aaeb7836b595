/**
 * The Llama family — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM: their config keys,
 * their weights' names in a Hugging Face checkpoint, and the project's layout of those weights.
 *
 * The math: x = embed[token]; per layer x += o(attn(rope(q, k), v)) over RMSNorm(x), grouped-query (query head h
 * reads K/V head h // (heads / kv_heads)), Qwen3 RMS-normalising each q and k head before the rotation, Qwen2 with
 * q/k/v biases; x += down(silu(gate(a)) * up(a)) over RMSNorm(x); logits = RMSNorm(x) @ lm_head^T (lm_head = embed
 * where tied).
 *
 * The project's layout (what a backend holds): the matvecs take input-first matrices (cuda/ops.h op_linear), so
 * q, k, v become one (hidden, q + 2 kv) matrix `qkv`, gate and up one (hidden, 2 I) matrix `gate_up`, o and down are
 * transposed; every linear has a bias vector (zeros where the checkpoint has none).
 */
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { UserError } from "../errors.ts";
import type { DtypeName } from "../ops.ts";
import type { ModelFamily } from "./family.ts";
import { readSmallTextFile } from "./files.ts";
import {
  CHUNK_ELEMENTS,
  formatShape,
  nameOf,
  numel,
  readSafetensors,
  Staging,
  streamTensor,
  WEIGHT_DTYPES,
  type ByteSource,
  type SafetensorsFile,
  writeSafetensors,
  type TensorInfo,
} from "./safetensors.ts";
import { streamSeeded, transposed, type ChunkVisitor, type ParameterSpec } from "./parameters.ts";

export const LLAMA_ARCHITECTURES = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "mistral",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
} as const;
export type LlamaArch = (typeof LLAMA_ARCHITECTURES)[keyof typeof LLAMA_ARCHITECTURES];

/** llama3 rope scaling (Llama 3.1/3.2): the inverse frequencies stretched between two wavelengths. */
export interface Llama3RopeScaling {
  factor: number;
  low_freq_factor: number;
  high_freq_factor: number;
  original_max_position_embeddings: number;
}

export interface LlamaConfig {
  arch: LlamaArch;
  name: string;
  n_layer: number;
  n_head: number;
  n_kv_head: number;
  head_dim: number;
  /** hidden_size */
  n_embd: number;
  intermediate_size: number;
  /** max_position_embeddings, or sliding_window where a layer's window is shorter (Mistral, Qwen2, Qwen3) */
  n_positions: number;
  /** where set, the window n_positions is held to: a cache that evicts past it is not supported */
  sliding_window?: number;
  vocab_size: number;
  rms_norm_eps: number;
  rope_theta: number;
  rope_scaling: Llama3RopeScaling | null;
  tie_word_embeddings: boolean;
  /** q, k and v projections with biases (Qwen2) */
  qkv_bias: boolean;
  /** RMSNorm over each q and k head before the rotation (Qwen3) */
  qk_norm: boolean;
}

export const isLlamaConfig = (cfg: object): cfg is LlamaConfig => "arch" in cfg;

/** q's columns (heads × head_dim) and k's (and v's). */
export const queryWidth = (cfg: LlamaConfig) => cfg.n_head * cfg.head_dim;
export const kvWidth = (cfg: LlamaConfig) => cfg.n_kv_head * cfg.head_dim;

// ---------------------------------------------------------------------------------------------
// config.json

type Raw = Record<string, unknown>;

/** Qwen3Config's head_dim where config.json leaves it out (transformers' configuration_qwen3.py). */
const QWEN3_DEFAULT_HEAD_DIM = 128;

/** Reads a Llama-family config.json (already parsed, `path` names it in errors). */
export function llamaConfigOf(raw: Raw, arch: LlamaArch, path: string, dir: string): LlamaConfig {
  const int = (key: string) => positiveInteger(raw, key, path);
  const num = (key: string, fallback?: number) => positiveNumber(raw, key, path, fallback);
  refuseOtherBiases(raw, arch, path);
  const n_head = int("num_attention_heads");
  // left out or null: one K/V head per query head, as Hugging Face reads it
  const n_kv_head = raw.num_key_value_heads == null ? n_head : int("num_key_value_heads");
  const n_embd = int("hidden_size");
  if (n_head % n_kv_head !== 0)
    throw new UserError(`${path}: num_attention_heads ${n_head} is not divisible by num_key_value_heads ${n_kv_head}`);
  // left out: Qwen3Config's own default, 128; the others' (and a null), hidden_size ÷ heads, as HF's models read it
  const head_dim =
    raw.head_dim === undefined && arch === "qwen3"
      ? QWEN3_DEFAULT_HEAD_DIM
      : raw.head_dim === undefined || raw.head_dim === null
        ? n_embd / n_head
        : int("head_dim");
  if (!Number.isInteger(head_dim))
    throw new UserError(`${path}: hidden_size ${n_embd} is not divisible by num_attention_heads ${n_head}`);
  if (head_dim % 16 !== 0 || head_dim > 256)
    throw new UserError(`${path}: head_dim ${head_dim} is not supported (a multiple of 16, at most 256)`);
  const act = raw.hidden_act ?? "silu";
  // "swish" is Hugging Face's other name for SiLU (ACT2FN)
  if (act !== "silu" && act !== "swish")
    throw new UserError(`${path}: hidden_act ${JSON.stringify(act)} is not supported (only "silu", or "swish")`);
  const maxPositions = int("max_position_embeddings");
  // a window at least as long as the context is full attention; runs are held to a shorter one
  const window = slidingWindowApplies(arch, raw, int("num_hidden_layers"), path) ? int("sliding_window") : maxPositions;
  return {
    arch,
    name: basename(resolve(dir)),
    n_layer: int("num_hidden_layers"),
    n_head,
    n_kv_head,
    head_dim,
    n_embd,
    intermediate_size: int("intermediate_size"),
    n_positions: Math.min(window, maxPositions),
    ...(window < maxPositions ? { sliding_window: window } : {}),
    vocab_size: int("vocab_size"),
    rms_norm_eps: num("rms_norm_eps", 1e-6),
    rope_theta: num("rope_theta", 10000),
    rope_scaling: ropeScaling(raw.rope_scaling, path),
    tie_word_embeddings: raw.tie_word_embeddings === true,
    qkv_bias: arch === "qwen2",
    qk_norm: arch === "qwen3",
  };
}

/**
 * Biases Hugging Face's models would add that the plans do not have: attention_bias (q, k, v and o_proj; Qwen2
 * always has its q/k/v biases and reads no such key) and Llama's mlp_bias.
 */
function refuseOtherBiases(raw: Raw, arch: LlamaArch, path: string): void {
  if (raw.attention_bias === true && arch !== "qwen2")
    throw new UserError(
      `${path}: attention_bias true (biases on q, k, v and o_proj) is not supported; of the attention's biases only Qwen2's q/k/v ones are`,
    );
  if (raw.mlp_bias === true)
    throw new UserError(`${path}: mlp_bias true (biases on gate, up and down) is not supported`);
}

/** Qwen2's and Qwen3's max_window_layers where a config leaves it out (Hugging Face transformers' configs). */
const QWEN_DEFAULT_MAX_WINDOW_LAYERS = 28;

/**
 * Whether some layer attends through a sliding window, as Hugging Face's models read the config: Mistral's every
 * layer where `sliding_window` is set; Qwen2's and Qwen3's layers from `max_window_layers` on where
 * `use_sliding_window` is true. (A config without `sliding_window` has none here; explicit `layer_types` are not
 * read.)
 */
function slidingWindowApplies(arch: LlamaArch, raw: Raw, layers: number, path: string): boolean {
  if (raw.sliding_window === undefined || raw.sliding_window === null) return false;
  if (arch === "mistral") return true;
  if ((arch !== "qwen2" && arch !== "qwen3") || raw.use_sliding_window !== true) return false;
  const full = raw.max_window_layers ?? QWEN_DEFAULT_MAX_WINDOW_LAYERS;
  if (!Number.isInteger(full) || (full as number) < 0)
    throw new UserError(`${path}: max_window_layers must be a non-negative integer, got ${JSON.stringify(full)}`);
  return (full as number) < layers;
}

function ropeScaling(v: unknown, path: string): Llama3RopeScaling | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "object" || Array.isArray(v)) throw new UserError(`${path}: rope_scaling must be an object or null`);
  const raw = v as Raw;
  const type = raw.rope_type ?? raw.type;
  if (type === "default") return null;
  if (type === undefined)
    throw new UserError(`${path}: rope_scaling has no rope_type (or type); only "llama3" is supported`);
  if (type !== "llama3")
    throw new UserError(`${path}: rope_scaling type ${JSON.stringify(type)} is not supported (only "llama3")`);
  const n = (k: string) => positiveNumber(raw, k, path, undefined, `rope_scaling.${k}`);
  return {
    factor: n("factor"),
    low_freq_factor: n("low_freq_factor"),
    high_freq_factor: n("high_freq_factor"),
    original_max_position_embeddings: n("original_max_position_embeddings"),
  };
}

function positiveInteger(raw: Raw, key: string, path: string): number {
  const v = raw[key];
  if (v === undefined) throw new UserError(`${path}: missing ${key}`);
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0)
    throw new UserError(`${path}: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

function positiveNumber(raw: Raw, key: string, path: string, fallback?: number, shown = key): number {
  const v = raw[key] ?? fallback;
  if (v === undefined) throw new UserError(`${path}: missing ${shown}`);
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
    throw new UserError(`${path}: ${shown} must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

/** The Hugging Face config.json of a Llama-family config. */
export function llamaHfConfig(cfg: LlamaConfig): Record<string, unknown> {
  const architecture = Object.entries(LLAMA_ARCHITECTURES).find(([, a]) => a === cfg.arch)![0];
  return {
    architectures: [architecture],
    model_type: cfg.arch,
    hidden_size: cfg.n_embd,
    intermediate_size: cfg.intermediate_size,
    num_hidden_layers: cfg.n_layer,
    num_attention_heads: cfg.n_head,
    num_key_value_heads: cfg.n_kv_head,
    head_dim: cfg.head_dim,
    max_position_embeddings: cfg.n_positions,
    vocab_size: cfg.vocab_size,
    rms_norm_eps: cfg.rms_norm_eps,
    rope_theta: cfg.rope_theta,
    ...(cfg.rope_scaling ? { rope_scaling: { rope_type: "llama3", ...cfg.rope_scaling } } : {}),
    hidden_act: "silu",
    tie_word_embeddings: cfg.tie_word_embeddings,
    attention_bias: cfg.qkv_bias,
  };
}

// ---------------------------------------------------------------------------------------------
// Rotary embedding

/** inv_freq_i = theta^(-2i / head_dim), stretched by llama3 scaling where the config has it (HF's rope_init_fn). */
export function inverseFrequencies(cfg: LlamaConfig): Float64Array {
  const half = cfg.head_dim / 2;
  const f = Float64Array.from({ length: half }, (_, i) => cfg.rope_theta ** ((-2 * i) / cfg.head_dim));
  const s = cfg.rope_scaling;
  if (!s) return f;
  const lowWavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const highWavelen = s.original_max_position_embeddings / s.high_freq_factor;
  return f.map((freq) => {
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) return freq;
    if (wavelen > lowWavelen) return freq / s.factor;
    const smooth =
      (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    return (1 - smooth) * (freq / s.factor) + smooth * freq;
  });
}

/** The rotary table's bytes for `positions` (ropeTable's, fp32). */
export const ropeTableBytes = (cfg: LlamaConfig, positions: number) => positions * cfg.head_dim * 4;

/** The rotary table op_rope reads: (positions, head_dim), each row cos(p f_0 .. p f_{d/2-1}) then sin(...). */
export function ropeTable(cfg: LlamaConfig, positions: number): Float32Array {
  const hs = cfg.head_dim,
    half = hs / 2;
  const f = inverseFrequencies(cfg);
  const table = new Float32Array(positions * hs);
  for (let p = 0; p < positions; p++)
    for (let i = 0; i < half; i++) {
      table[p * hs + i] = Math.cos(p * f[i]!);
      table[p * hs + half + i] = Math.sin(p * f[i]!);
    }
  return table;
}

// ---------------------------------------------------------------------------------------------
// Parameters: the project's layout, and where each comes from in a checkpoint

/** How a project parameter is built from checkpoint tensors (Linear layout (out, in)). */
type Source =
  | { how: "copy"; from: string }
  | { how: "transpose"; from: string[] } // (out_k, in) tensors → one (in, Σ out_k) matrix
  | { how: "concat"; from: string[] } // bias vectors end to end
  | { how: "zeros" };

export interface LlamaParameter extends ParameterSpec {
  source: Source;
}

/** Every parameter of the project's layout, in placement order, with its source in a checkpoint. */
export function llamaParameters(cfg: LlamaConfig): LlamaParameter[] {
  const C = cfg.n_embd,
    Q = queryWidth(cfg),
    KV = kvWidth(cfg),
    I = cfg.intermediate_size;
  const out: LlamaParameter[] = [];
  const add = (name: string, shape: number[], init: ParameterSpec["init"], source: Source) =>
    out.push({ name, shape, init, source, ...(source.how === "transpose" && { linear: true }) });
  add("embed_tokens.weight", [cfg.vocab_size, C], "normal", { how: "copy", from: "model.embed_tokens.weight" });
  for (let l = 0; l < cfg.n_layer; l++) {
    const hf = `model.layers.${l}`;
    const p = `layers.${l}`;
    add(`${p}.input_layernorm.weight`, [C], "ones", { how: "copy", from: `${hf}.input_layernorm.weight` });
    const qkv = ["q", "k", "v"].map((x) => `${hf}.self_attn.${x}_proj`);
    add(`${p}.qkv.weight`, [C, Q + 2 * KV], "normal", { how: "transpose", from: qkv.map((n) => `${n}.weight`) });
    add(
      `${p}.qkv.bias`,
      [Q + 2 * KV],
      "zeros",
      cfg.qkv_bias ? { how: "concat", from: qkv.map((n) => `${n}.bias`) } : { how: "zeros" },
    );
    if (cfg.qk_norm) {
      add(`${p}.q_norm.weight`, [cfg.head_dim], "ones", { how: "copy", from: `${hf}.self_attn.q_norm.weight` });
      add(`${p}.k_norm.weight`, [cfg.head_dim], "ones", { how: "copy", from: `${hf}.self_attn.k_norm.weight` });
    }
    add(`${p}.o_proj.weight`, [Q, C], "normal", { how: "transpose", from: [`${hf}.self_attn.o_proj.weight`] });
    add(`${p}.o_proj.bias`, [C], "zeros", { how: "zeros" });
    add(`${p}.post_attention_layernorm.weight`, [C], "ones", {
      how: "copy",
      from: `${hf}.post_attention_layernorm.weight`,
    });
    add(`${p}.gate_up.weight`, [C, 2 * I], "normal", {
      how: "transpose",
      from: [`${hf}.mlp.gate_proj.weight`, `${hf}.mlp.up_proj.weight`],
    });
    add(`${p}.gate_up.bias`, [2 * I], "zeros", { how: "zeros" });
    add(`${p}.down.weight`, [I, C], "normal", { how: "transpose", from: [`${hf}.mlp.down_proj.weight`] });
    add(`${p}.down.bias`, [C], "zeros", { how: "zeros" });
  }
  add("norm.weight", [C], "ones", { how: "copy", from: "model.norm.weight" });
  if (!cfg.tie_word_embeddings)
    add("lm_head.weight", [cfg.vocab_size, C], "normal", { how: "copy", from: "lm_head.weight" });
  return out;
}

/** The checkpoint tensors a config expects, with their shapes (HF layout). */
export function checkpointTensors(cfg: LlamaConfig): Map<string, number[]> {
  const C = cfg.n_embd,
    Q = queryWidth(cfg),
    KV = kvWidth(cfg),
    I = cfg.intermediate_size;
  const t = new Map<string, number[]>([["model.embed_tokens.weight", [cfg.vocab_size, C]]]);
  for (let l = 0; l < cfg.n_layer; l++) {
    const hf = `model.layers.${l}`;
    t.set(`${hf}.input_layernorm.weight`, [C]);
    t.set(`${hf}.self_attn.q_proj.weight`, [Q, C]);
    t.set(`${hf}.self_attn.k_proj.weight`, [KV, C]);
    t.set(`${hf}.self_attn.v_proj.weight`, [KV, C]);
    if (cfg.qkv_bias) {
      t.set(`${hf}.self_attn.q_proj.bias`, [Q]);
      t.set(`${hf}.self_attn.k_proj.bias`, [KV]);
      t.set(`${hf}.self_attn.v_proj.bias`, [KV]);
    }
    if (cfg.qk_norm) {
      t.set(`${hf}.self_attn.q_norm.weight`, [cfg.head_dim]);
      t.set(`${hf}.self_attn.k_norm.weight`, [cfg.head_dim]);
    }
    t.set(`${hf}.self_attn.o_proj.weight`, [C, Q]);
    t.set(`${hf}.post_attention_layernorm.weight`, [C]);
    t.set(`${hf}.mlp.gate_proj.weight`, [I, C]);
    t.set(`${hf}.mlp.up_proj.weight`, [I, C]);
    t.set(`${hf}.mlp.down_proj.weight`, [C, I]);
  }
  t.set("model.norm.weight", [C]);
  if (!cfg.tie_word_embeddings) t.set("lm_head.weight", [cfg.vocab_size, C]);
  return t;
}

/** Exact parameter count of the checkpoint (a tied output embedding counted once). */
export function llamaParameterCount(cfg: LlamaConfig): number {
  return [...checkpointTensors(cfg).values()].reduce((sum, shape) => sum + numel(shape), 0);
}

// ---------------------------------------------------------------------------------------------
// Weights: streamed from a checkpoint (single-file or sharded) or seeded

export interface LlamaWeights {
  config: LlamaConfig;
  source: string;
  storedAs: DtypeName;
  skipped: { tensors: number; bytes: number; names: string[] };
  /** every parameter of llamaParameters(config), in order, whole, as float32 chunks */
  stream(visit: ChunkVisitor): void;
}

/** Where each checkpoint tensor is: its file and its header entry. */
type TensorIndex = Map<string, { file: SafetensorsFile; info: TensorInfo }>;

const INDEX_FILE = "model.safetensors.index.json";
const SINGLE_FILE = "model.safetensors";
const MAX_INDEX_BYTES = 64 << 20;

/** Opens a checkpoint's tensors: model.safetensors, or the shards model.safetensors.index.json names. */
export function openCheckpoint(dir: string): { index: TensorIndex; source: string } {
  const single = join(dir, SINGLE_FILE);
  if (existsSync(single)) {
    const file = readSafetensors(single);
    return { index: new Map([...file.tensors.values()].map((info) => [info.name, { file, info }])), source: single };
  }
  const indexPath = join(dir, INDEX_FILE);
  if (!existsSync(indexPath))
    throw new UserError(`no ${SINGLE_FILE} or ${INDEX_FILE} in ${dir} (expected a Hugging Face checkpoint)`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(readSmallTextFile(indexPath, MAX_INDEX_BYTES));
  } catch (e) {
    if (e instanceof UserError) throw e;
    throw new UserError(`${indexPath}: not valid JSON (${(e as Error).message})`);
  }
  const map = (parsed as Raw | null)?.weight_map;
  if (typeof map !== "object" || map === null || Array.isArray(map))
    throw new UserError(`${indexPath}: expected an object with a "weight_map" object`);
  const shards = new Map<string, SafetensorsFile>();
  const index: TensorIndex = new Map();
  for (const [tensor, shard] of Object.entries(map as Raw)) {
    if (typeof shard !== "string" || shard === "" || basename(shard) !== shard || shard === "." || shard === "..")
      throw new UserError(
        `${indexPath}: tensor ${nameOf(tensor)} names shard ${JSON.stringify(shard)}, not a file in ${dir}`,
      );
    if (!shards.has(shard)) {
      const path = join(dir, shard);
      if (!existsSync(path))
        throw new UserError(`${indexPath}: shard ${nameOf(shard)} (of ${nameOf(tensor)}) is missing`);
      shards.set(shard, readSafetensors(path));
    }
  }
  for (const [shard, file] of shards) {
    for (const info of file.tensors.values()) {
      const other = index.get(info.name);
      if (other)
        throw new UserError(
          `${indexPath}: tensor ${nameOf(info.name)} is in two shards (${basename(other.file.path)} and ${shard})`,
        );
      index.set(info.name, { file, info });
    }
  }
  for (const [tensor, shard] of Object.entries(map as Raw)) {
    const at = index.get(tensor);
    if (!at || basename(at.file.path) !== shard)
      throw new UserError(`${indexPath}: tensor ${nameOf(tensor)} is not in its shard ${nameOf(String(shard))}`);
  }
  return { index, source: indexPath };
}

/** Checks every tensor's presence, shape and dtype against the config; the data is read when streamed. */
export function loadLlama(dir: string, config: LlamaConfig): LlamaWeights {
  if (!statSync(dir).isDirectory()) throw new UserError(`--model takes a directory, not a file: ${dir}`);
  const { index, source } = openCheckpoint(dir);
  const expected = checkpointTensors(config);
  const where = `${source} (config: ${join(dir, "config.json")})`;
  for (const [name, shape] of expected) {
    const t = index.get(name);
    if (!t) throw new UserError(`${where}: tensor ${name} is missing (expected ${formatShape(shape)})`);
    const got = t.info.shape;
    if (got.length !== shape.length || got.some((d, i) => d !== shape[i]))
      throw new UserError(`${where}: ${nameOf(name)} has shape ${formatShape(got)}, expected ${formatShape(shape)}`);
    if (!WEIGHT_DTYPES.has(t.info.dtype))
      throw new UserError(
        `${where}: tensor ${nameOf(name)} has dtype ${t.info.dtype}; weights must be F32, F16 or BF16`,
      );
  }
  const skippable = (name: string) => name === "lm_head.weight" && config.tie_word_embeddings;
  const extras = [...index.keys()].filter((n) => !expected.has(n) && !skippable(n) && !/rotary_emb\.inv_freq$/.test(n));
  if (extras.length)
    throw new UserError(
      `${where}: unexpected tensors ${extras.slice(0, 4).map(nameOf).join(", ")}${extras.length > 4 ? ` (and ${extras.length - 4} more)` : ""}`,
    );
  const skipped = [...index.entries()].filter(([n]) => !expected.has(n));
  const matrices = [...expected.entries()].filter(([, s]) => s.length === 2).map(([n]) => index.get(n)!.info.dtype);
  const one = new Set(matrices);
  const only = one.size === 1 ? [...one][0] : "F32";
  return {
    config,
    source,
    storedAs: only === "BF16" ? "bf16" : only === "F16" ? "f16" : "f32",
    skipped: {
      tensors: skipped.length,
      bytes: skipped.reduce((s, [, t]) => s + (t.info.end - t.info.begin), 0),
      names: skipped.map(([n]) => n),
    },
    stream: (visit) => streamLlamaCheckpoint(index, llamaParameters(config), visit),
  };
}

/** Streams the project's parameters from the checkpoint: copies chunk by chunk, transposed matrices a tensor at a time. */
function streamLlamaCheckpoint(index: TensorIndex, params: LlamaParameter[], visit: ChunkVisitor): void {
  const sources = new Map<SafetensorsFile, ByteSource>();
  const sourceOf = (file: SafetensorsFile) => {
    const open = sources.get(file) ?? file.open();
    sources.set(file, open);
    return open;
  };
  const staging = new Staging();
  const whole = (name: string) => {
    const { file, info } = index.get(name)!;
    const out = new Float32Array(numel(info.shape));
    streamTensor(file, sourceOf(file), info, staging, (chunk, offset) => out.set(chunk, offset));
    return { data: out, shape: info.shape };
  };
  try {
    for (const p of params) {
      const s = p.source;
      if (s.how === "copy") {
        const { file, info } = index.get(s.from)!;
        streamTensor(file, sourceOf(file), info, staging, (chunk, offset) => visit(p, chunk, offset));
      } else if (s.how === "zeros") {
        emitChunks(p, new Float32Array(numel(p.shape)), visit);
      } else if (s.how === "concat") {
        const parts = s.from.map((n) => whole(n).data);
        const out = new Float32Array(numel(p.shape));
        let at = 0;
        for (const part of parts) {
          out.set(part, at);
          at += part.length;
        }
        emitChunks(p, out, visit);
      } else {
        emitChunks(p, transposeConcat(s.from.map(whole)), visit);
      }
    }
  } finally {
    for (const s of sources.values()) s.close();
  }
}

/** (out_k, in) matrices → one (in, Σ out_k) matrix: row c is column c of each, end to end. */
function transposeConcat(parts: Array<{ data: Float32Array; shape: number[] }>): Float32Array {
  const inDim = parts[0]!.shape[1]!;
  const total = parts.reduce((s, p) => s + p.shape[0]!, 0);
  const out = new Float32Array(inDim * total);
  let col0 = 0;
  for (const { data, shape } of parts) {
    const rows = shape[0]!;
    for (let r = 0; r < rows; r++) {
      const src = r * inDim;
      for (let c = 0; c < inDim; c++) out[c * total + col0 + r] = data[src + c]!;
    }
    col0 += rows;
  }
  return out;
}

function emitChunks(spec: ParameterSpec, data: Float32Array, visit: ChunkVisitor): void {
  for (let offset = 0; offset < data.length; offset += CHUNK_ELEMENTS)
    visit(spec, data.subarray(offset, Math.min(data.length, offset + CHUNK_ELEMENTS)), offset);
}

/** Seeded weights in the project's layout: N(0, 0.02) matrices, norms 1, biases 0 (no checkpoint needed). */
export function randomLlamaWeights(config: LlamaConfig, seed = 0): LlamaWeights {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new UserError(`seed must be a non-negative integer, got ${seed}`);
  return {
    config,
    source: `random (seed ${seed})`,
    storedAs: "f32",
    skipped: { tensors: 0, bytes: 0, names: [] },
    stream: (visit) => streamSeeded(llamaParameters(config), seed, visit),
  };
}

// ---------------------------------------------------------------------------------------------
// Presets: the released models' exact shapes (their config.json), for seeded weights

function llamaPreset(
  name: string,
  arch: LlamaArch,
  shape: Pick<LlamaConfig, "n_layer" | "n_head" | "n_kv_head" | "head_dim" | "n_embd" | "intermediate_size">,
  rest: Partial<LlamaConfig> & Pick<LlamaConfig, "n_positions" | "vocab_size" | "rope_theta" | "tie_word_embeddings">,
): LlamaConfig {
  return {
    arch,
    name,
    ...shape,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    qkv_bias: arch === "qwen2",
    qk_norm: arch === "qwen3",
    ...rest,
  };
}

const llama3Scaling = (factor: number): Llama3RopeScaling => ({
  factor,
  low_freq_factor: 1,
  high_freq_factor: 4,
  original_max_position_embeddings: 8192,
});

/** The served Llama-family models' shapes (HF config.json of each), with their exact parameter counts. */
export const LLAMA_PRESETS: Readonly<Record<string, LlamaConfig>> = Object.fromEntries(
  [
    llamaPreset(
      "smollm2-135m",
      "llama",
      { n_layer: 30, n_head: 9, n_kv_head: 3, head_dim: 64, n_embd: 576, intermediate_size: 1536 },
      { n_positions: 8192, vocab_size: 49152, rope_theta: 100000, tie_word_embeddings: true },
    ),
    llamaPreset(
      "smollm2-360m",
      "llama",
      { n_layer: 32, n_head: 15, n_kv_head: 5, head_dim: 64, n_embd: 960, intermediate_size: 2560 },
      { n_positions: 8192, vocab_size: 49152, rope_theta: 100000, tie_word_embeddings: true },
    ),
    llamaPreset(
      "qwen2.5-0.5b",
      "qwen2",
      { n_layer: 24, n_head: 14, n_kv_head: 2, head_dim: 64, n_embd: 896, intermediate_size: 4864 },
      { n_positions: 32768, vocab_size: 151936, rope_theta: 1000000, tie_word_embeddings: true, rms_norm_eps: 1e-6 },
    ),
    llamaPreset(
      "qwen3-0.6b",
      "qwen3",
      { n_layer: 28, n_head: 16, n_kv_head: 8, head_dim: 128, n_embd: 1024, intermediate_size: 3072 },
      { n_positions: 40960, vocab_size: 151936, rope_theta: 1000000, tie_word_embeddings: true, rms_norm_eps: 1e-6 },
    ),
    llamaPreset(
      "llama-3.2-1b",
      "llama",
      { n_layer: 16, n_head: 32, n_kv_head: 8, head_dim: 64, n_embd: 2048, intermediate_size: 8192 },
      {
        n_positions: 131072,
        vocab_size: 128256,
        rope_theta: 500000,
        rope_scaling: llama3Scaling(32),
        tie_word_embeddings: true,
      },
    ),
    llamaPreset(
      "tinyllama-1.1b",
      "llama",
      { n_layer: 22, n_head: 32, n_kv_head: 4, head_dim: 64, n_embd: 2048, intermediate_size: 5632 },
      { n_positions: 2048, vocab_size: 32000, rope_theta: 10000, tie_word_embeddings: false },
    ),
    llamaPreset(
      "llama-3.2-3b",
      "llama",
      { n_layer: 28, n_head: 24, n_kv_head: 8, head_dim: 128, n_embd: 3072, intermediate_size: 8192 },
      {
        n_positions: 131072,
        vocab_size: 128256,
        rope_theta: 500000,
        rope_scaling: llama3Scaling(32),
        tie_word_embeddings: true,
      },
    ),
    llamaPreset(
      "llama-3.1-8b",
      "llama",
      { n_layer: 32, n_head: 32, n_kv_head: 8, head_dim: 128, n_embd: 4096, intermediate_size: 14336 },
      {
        n_positions: 131072,
        vocab_size: 128256,
        rope_theta: 500000,
        rope_scaling: llama3Scaling(8),
        tie_word_embeddings: false,
      },
    ),
  ].map((c) => [c.name, c]),
);

// ---------------------------------------------------------------------------------------------
// Writing a checkpoint back (the peers load Hugging Face directories)

/**
 * Writes `w` as a Hugging Face checkpoint directory (config.json + model.safetensors, F32) that loadLlama reads
 * back: each parameter of the project's layout becomes the checkpoint tensors it came from (llamaParameters'
 * sources), a transposed matrix gathered whole, one at a time.
 */
export function saveLlamaModel(w: LlamaWeights, dir: string): void {
  const cfg = w.config;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), `${JSON.stringify(llamaHfConfig(cfg), null, 2)}\n`);
  const shapes = checkpointTensors(cfg);
  const params = llamaParameters(cfg);
  const order = params.flatMap((p) =>
    p.source.how === "copy" ? [p.source.from] : p.source.how === "zeros" ? [] : p.source.from,
  );
  const byName = new Map(params.map((p) => [p.name, p]));
  let gathering: Float32Array | null = null;
  writeSafetensors(
    join(dir, "model.safetensors"),
    order.map((name) => ({ name, shape: shapes.get(name)! })),
    (emit) =>
      w.stream((spec, chunk, offset) => {
        const s = byName.get(spec.name)!.source;
        if (s.how === "zeros") return;
        if (s.how === "copy") return emit(chunk);
        gathering ??= new Float32Array(numel(spec.shape));
        gathering.set(chunk, offset);
        if (offset + chunk.length < gathering.length) return;
        const whole = gathering;
        gathering = null;
        if (s.how === "concat") return emit(whole); // biases end to end, as the tensors follow one another
        emit(transposed(whole, spec.shape[0]!, spec.shape[1]!)); // (out, in): the parts' rows one after another
      }),
  );
}

// ---------------------------------------------------------------------------------------------
// The family's row in the registry (architectures.ts)

export const LLAMA_FAMILY: ModelFamily<LlamaConfig, LlamaWeights> = {
  architectures: LLAMA_ARCHITECTURES,
  shapeFamily: "llama-style",
  rotary: true,
  presets: LLAMA_PRESETS,
  owns: isLlamaConfig,
  modelType: (cfg) => cfg.arch,
  configOf: (raw, modelType, path, dir) => llamaConfigOf(raw, modelType as LlamaArch, path, dir),
  load: loadLlama,
  randomWeights: randomLlamaWeights,
  save: saveLlamaModel,
  parameterCount: llamaParameterCount,
  parametersHow: (cfg) =>
    `exact for ${cfg.arch}: every tensor of its checkpoint (src/model/llama.ts), a tied output head counted once`,
  headDim: (cfg) => cfg.head_dim,
  positionsLimit: (cfg) =>
    cfg.sliding_window === undefined
      ? `max_position_embeddings ${cfg.n_positions}`
      : `sliding_window ${cfg.sliding_window}, to which runs are held, as a cache that evicts past the window is not supported`,
  kvHeads: (cfg) => cfg.n_kv_head,
  withKvHeads: (cfg, kvHeads) => ({ ...cfg, n_kv_head: kvHeads }),
  placedParameters: llamaParameters,
  linears: (cfg) => {
    const C = cfg.n_embd,
      Q = queryWidth(cfg),
      I = cfg.intermediate_size;
    return [
      ["qkv_proj", C, Q + 2 * kvWidth(cfg)],
      ["o_proj", Q, C],
      ["gate_up_proj", C, 2 * I],
      ["down_proj", I, C],
    ];
  },
};
