/** GPT-2 model description: the one typed config every other layer sizes itself from. */
import { existsSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { UserError } from "../errors.ts";
import { readSmallTextFile } from "./files.ts";

export interface GPT2Config {
  name: string;
  n_layer: number;
  n_head: number;
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

/** A config.json is a few hundred bytes; anything above this is not one. */
const MAX_CONFIG_BYTES = 1 << 20;

export function parseJsonObject(path: string): Record<string, unknown> {
  const text = readSmallTextFile(path, MAX_CONFIG_BYTES); // says what went wrong: a directory, a FIFO, no permission
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new UserError(`${path}: not valid JSON (${(e as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UserError(`${path}: expected a JSON object`);
  }
  return value as Record<string, unknown>;
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

/** Exact parameter count; the output projection is tied to wte and counted once. */
export function parameterCount(cfg: GPT2Config): number {
  const C = cfg.n_embd;
  const embeddings = (cfg.vocab_size + cfg.n_positions) * C; // wte (V, C) + wpe (T, C)
  // ln_1, ln_2: 2 × 2C; c_attn: C·3C + 3C; attn c_proj: C·C + C; c_fc: C·4C + 4C; mlp c_proj: 4C·C + C
  const perLayer = 12 * C * C + 13 * C;
  return embeddings + cfg.n_layer * perLayer + 2 * C; // + ln_f
}

export function weightBytes(cfg: GPT2Config, bytesPerElement = 4): number {
  return parameterCount(cfg) * bytesPerElement;
}

/** K and V, each (n_layer, C) per token. */
export function kvCacheBytesPerToken(cfg: GPT2Config, bytesPerElement = 4): number {
  return 2 * cfg.n_layer * cfg.n_embd * bytesPerElement;
}
