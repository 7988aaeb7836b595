/**
 * KV-cache memory of a decoder, from a Hugging Face config.json or a preset: per token, for a context and
 * a batch, against the weights, and the context × batch at which the cache outgrows the weights.
 *   GPT-2:        n_layer, n_head, n_embd (every head keeps its own K and V)
 *   Llama-style:  num_hidden_layers, num_attention_heads, num_key_value_heads (GQA / MQA), head_dim,
 *                 hidden_size, intermediate_size, vocab_size (Llama, Mistral, Qwen2, Mixtral …)
 * K and V per token: 2 × layers × kv_heads × head_dim × bytes per element.
 */

import { UserError } from "../errors.ts";
import { DTYPE_BYTES, type DtypeName } from "../ops.ts";
import { checkNamesAgree, familyOf, supportedModelType, type ModelConfig } from "./architectures.ts";
import { parseJsonObject } from "./files.ts";
import type { GPT2Config } from "./gpt2.ts";
import { LLAMA_ARCHITECTURES, llamaConfigOf } from "./llama.ts";

/** What the cache's size depends on, and the weights' parameter count with how it was found. */
export interface DecoderShape {
  name: string;
  family: "gpt2" | "llama-style";
  layers: number;
  heads: number;
  kv_heads: number;
  head_dim: number;
  max_context: number;
  parameters: number;
  parameters_how: string;
  /** facts that bear on the cache but are not in the figures (a sliding window) */
  notes: string[];
}

export interface KvReport extends DecoderShape {
  dtype: DtypeName;
  bytes_per_element: number;
  context: number;
  batch: number;
  kv_bytes_per_token: number;
  kv_bytes: number;
  /** the same model with one K and V per query head */
  mha_kv_bytes_per_token: number;
  /** heads / kv_heads: how many times smaller GQA / MQA makes the cache */
  gqa_saving: number;
  weight_bytes: number;
  /** context × batch at which the cache holds as many bytes as the weights */
  crossover_tokens: number;
  crossover: { batch: number; context: number }[];
}

/** The decoder shape of a model the project runs (a preset, a checkpoint's config). */
export function shapeOf(cfg: ModelConfig): DecoderShape {
  const family = familyOf(cfg);
  return {
    name: cfg.name,
    family: family.shapeFamily,
    layers: cfg.n_layer,
    heads: cfg.n_head,
    kv_heads: family.kvHeads(cfg),
    head_dim: family.headDim(cfg),
    max_context: cfg.n_positions,
    parameters: family.parameterCount(cfg),
    parameters_how: family.parametersHow(cfg),
    notes: [],
  };
}

/** The decoder shape of a parsed config.json; `where` names it in errors. */
export function shapeFromConfig(raw: Record<string, unknown>, name: string, where: string): DecoderShape {
  checkNamesAgree(raw, where);
  const modelType = supportedModelType(raw);
  const arch = Object.values(LLAMA_ARCHITECTURES).find((a) => a === modelType);
  if (arch && raw.num_local_experts === undefined) {
    // an architecture the project runs: the same config rules and exact count as generate and profile
    const cfg = llamaConfigOf(raw, arch, where, name);
    const held = cfg.sliding_window === undefined ? [] : [heldToWindowNote(cfg.sliding_window, raw)];
    return { ...shapeOf(cfg), name, notes: held };
  }
  const int = (key: string, fallback?: number): number => {
    const v = raw[key] ?? fallback;
    if (v === undefined || v === null) throw new UserError(`${where}: missing ${key}`);
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0)
      throw new UserError(`${where}: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  };
  if ("n_layer" in raw || raw.model_type === "gpt2") {
    const cfg: GPT2Config = {
      name,
      n_layer: int("n_layer"),
      n_head: int("n_head"),
      n_embd: int("n_embd"),
      n_positions: int("n_positions", raw.n_ctx as number | undefined),
      vocab_size: int("vocab_size"),
      layer_norm_epsilon: 1e-5,
    };
    if (cfg.n_embd % cfg.n_head)
      throw new UserError(`${where}: n_embd ${cfg.n_embd} is not divisible by n_head ${cfg.n_head}`);
    if (raw.n_inner != null && raw.n_inner !== 4 * cfg.n_embd)
      throw new UserError(`${where}: n_inner ${JSON.stringify(raw.n_inner)} is not GPT-2's 4 × n_embd`);
    return shapeOf(cfg);
  }
  if (!("num_hidden_layers" in raw)) {
    throw new UserError(
      `${where}: neither GPT-2's n_layer/n_head/n_embd nor Llama-style num_hidden_layers/num_attention_heads/hidden_size`,
    );
  }
  const layers = int("num_hidden_layers");
  const heads = int("num_attention_heads");
  const kvHeads = int("num_key_value_heads", heads);
  const d = int("hidden_size");
  const headDim = int("head_dim", d % heads === 0 ? d / heads : undefined);
  if (heads % kvHeads)
    throw new UserError(`${where}: num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`);
  const { parameters, how } = llamaParameters(raw, {
    layers,
    heads,
    kvHeads,
    d,
    headDim,
    vocab: int("vocab_size"),
    inter: int("intermediate_size"),
  });
  return {
    name,
    family: "llama-style",
    layers,
    heads,
    kv_heads: kvHeads,
    head_dim: headDim,
    max_context: int("max_position_embeddings", 4096),
    parameters,
    parameters_how: how,
    notes: slidingWindowNotes(raw),
  };
}

/** Where the loader holds a model to its window, as generate and profile run it. */
const heldToWindowNote = (window: number, raw: Record<string, unknown>) =>
  `sliding_window ${window} is shorter than max_position_embeddings ${raw.max_position_embeddings}: generate and profile are held to the window (a cache that evicts past it is not supported); the figures here are for a full cache of the context asked`;

/** An architecture the project does not run: its window, if any, read as Hugging Face's defaults would. */
function slidingWindowNotes(raw: Record<string, unknown>): string[] {
  const window = raw.sliding_window;
  return typeof window === "number" && raw.use_sliding_window !== false
    ? [
        `sliding_window ${window}: a cache that evicts beyond the window holds at most ${window} tokens per sequence; the figures are for a full cache`,
      ]
    : [];
}

/**
 * Llama-style parameters from the shapes: embeddings (and an untied head), per layer q/o (d × heads·hd),
 * k/v (d × kv_heads·hd), a gated MLP (3 × d × intermediate; × experts plus a router for MoE), two RMSNorm
 * weights, QKV biases when attention_bias (Qwen2 has them), and the final norm.
 */
function llamaParameters(
  raw: Record<string, unknown>,
  s: { layers: number; heads: number; kvHeads: number; d: number; headDim: number; vocab: number; inter: number },
) {
  const tied = raw.tie_word_embeddings === true;
  const biases = raw.attention_bias === true || raw.model_type === "qwen2";
  const experts = typeof raw.num_local_experts === "number" ? raw.num_local_experts : 1;
  const attention =
    s.d * s.headDim * (2 * s.heads + 2 * s.kvHeads) + (biases ? s.headDim * (s.heads + 2 * s.kvHeads) : 0);
  const mlp = experts * 3 * s.d * s.inter + (experts > 1 ? s.d * experts : 0);
  const perLayer = attention + mlp + 2 * s.d;
  const parameters = s.vocab * s.d * (tied ? 1 : 2) + s.layers * perLayer + s.d;
  const how =
    `estimated from the shapes: embeddings${tied ? " (head tied)" : " and output head"} ${tied ? "" : "2 × "}vocab × hidden, per layer q/k/v/o projections` +
    `${biases ? " with QKV biases" : ""}, a gated MLP 3 × hidden × intermediate${experts > 1 ? ` × ${experts} experts plus a router` : ""} and two norms, a final norm`;
  return { parameters, how };
}

/** A config.json file read as a decoder shape; every problem is one line. */
export function readDecoderConfig(path: string): DecoderShape {
  let r: Record<string, unknown>;
  try {
    r = parseJsonObject(path); // a regular file of at most 1 MiB: not a FIFO or /dev/zero
  } catch (e) {
    throw e instanceof UserError ? new UserError(`--config ${e.message}`) : e;
  }
  const name =
    typeof r._name_or_path === "string" ? r._name_or_path : typeof r.model_type === "string" ? r.model_type : "model";
  return shapeFromConfig(r, name, path);
}

/** Batches at which the crossover is listed. */
const CROSSOVER_BATCHES = [1, 2, 4, 8, 16, 32, 64];

export function kvReport(shape: DecoderShape, context: number, batch: number, dtype: DtypeName): KvReport {
  const bytes = DTYPE_BYTES[dtype];
  const perToken = 2 * shape.layers * shape.kv_heads * shape.head_dim * bytes;
  const weightBytes = shape.parameters * bytes;
  const crossoverTokens = Math.ceil(weightBytes / perToken);
  return {
    ...shape,
    dtype,
    bytes_per_element: bytes,
    context,
    batch,
    kv_bytes_per_token: perToken,
    kv_bytes: perToken * context * batch,
    mha_kv_bytes_per_token: 2 * shape.layers * shape.heads * shape.head_dim * bytes,
    gqa_saving: shape.heads / shape.kv_heads,
    weight_bytes: weightBytes,
    crossover_tokens: crossoverTokens,
    crossover: CROSSOVER_BATCHES.map((b) => ({ batch: b, context: Math.ceil(crossoverTokens / b) })),
  };
}
