/**
 * The architectures this project runs, by the `architectures` / `model_type` of a Hugging Face config.json: GPT-2
 * (config.ts, weights.ts) and the Llama family (llama.ts). Adding one: its config keys and weight names in a file
 * of its own under model/, a row here, its plan beside src/plan.ts, its buffers under src/run/.
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { UserError } from "../errors.ts";
import { parameterCount, parseJsonObject, readHFConfig, type GPT2Config } from "./config.ts";
import {
  isLlamaConfig,
  kvWidth,
  LLAMA_ARCHITECTURES,
  llamaConfigOf,
  llamaParameterCount,
  llamaParameters,
  loadLlama,
  type LlamaConfig,
  type LlamaWeights,
} from "./llama.ts";
import { loadModel, parameterSpecs, type GPT2Weights, type ParameterSpec } from "./weights.ts";

export type ModelConfig = GPT2Config | LlamaConfig;
export type ModelWeights = GPT2Weights | LlamaWeights;

/** The HF architecture names, with their model_type. */
export const ARCHITECTURES: Readonly<Record<string, string>> = { GPT2LMHeadModel: "gpt2", ...LLAMA_ARCHITECTURES };

/** The architecture of a parsed config.json: its `architectures[0]`, else its `model_type`. */
function architectureOf(raw: Record<string, unknown>, path: string): string {
  const names = Array.isArray(raw.architectures) ? raw.architectures : [];
  // GPT-2 checkpoints from before `architectures` name neither: they are GPT-2
  const byType = raw.model_type === undefined ? "gpt2" : Object.values(ARCHITECTURES).find((t) => t === raw.model_type);
  const found = names.length > 0 ? ARCHITECTURES[String(names[0])] : byType;
  if (!found) {
    const named = names.length > 0 ? JSON.stringify(names[0]) : `model_type ${JSON.stringify(raw.model_type)}`;
    throw new UserError(
      `${path}: architecture ${named} is not supported (supported: ${Object.keys(ARCHITECTURES).join(", ")})`,
    );
  }
  return found;
}

/** Opens a Hugging Face checkpoint directory of any supported architecture. */
export function loadAnyModel(dir: string): ModelWeights {
  if (!existsSync(dir)) throw new UserError(`model directory not found: ${dir}`);
  if (!statSync(dir).isDirectory())
    throw new UserError(`--model takes a directory (with config.json and model.safetensors), not a file: ${dir}`);
  const path = join(dir, "config.json");
  if (!existsSync(path)) throw new UserError(`no config.json in ${dir} (expected a Hugging Face checkpoint directory)`);
  const raw = parseJsonObject(path);
  const arch = architectureOf(raw, path);
  if (arch === "gpt2") return loadModel(dir);
  return loadLlama(dir, llamaConfigOf(raw, arch as LlamaConfig["arch"], path, dir));
}

/** The config of any supported checkpoint directory (GPT-2's through readHFConfig). */
export function readAnyConfig(dir: string): ModelConfig {
  const path = join(dir, "config.json");
  if (!existsSync(path)) throw new UserError(`no config.json in ${dir} (expected a Hugging Face checkpoint directory)`);
  const raw = parseJsonObject(path);
  const arch = architectureOf(raw, path);
  return arch === "gpt2" ? readHFConfig(dir) : llamaConfigOf(raw, arch as LlamaConfig["arch"], path, dir);
}

/** Exact parameter count of any supported model (a tied output embedding counted once). */
export function parameterCountOf(cfg: ModelConfig): number {
  return isLlamaConfig(cfg) ? llamaParameterCount(cfg) : parameterCount(cfg);
}

/** The width of one attention head: head_dim (GPT-2: n_embd / n_head). */
export function headDimOf(cfg: ModelConfig): number {
  return isLlamaConfig(cfg) ? cfg.head_dim : cfg.n_embd / cfg.n_head;
}

/** Key and value columns of one layer's cache row: n_kv_head × head_dim (GPT-2: n_embd). */
export function kvColumns(cfg: ModelConfig): number {
  return isLlamaConfig(cfg) ? kvWidth(cfg) : cfg.n_embd;
}

/** KV cache bytes per token: 2 × layers × kv_heads × head_dim × bytes per element. */
export function kvBytesPerToken(cfg: ModelConfig, bytesPerElement = 4): number {
  return 2 * cfg.n_layer * kvColumns(cfg) * bytesPerElement;
}

/** The parameters as a backend holds them (name, shape, init), in placement order. */
export function placedParameters(cfg: ModelConfig): ParameterSpec[] {
  return isLlamaConfig(cfg) ? llamaParameters(cfg) : parameterSpecs(cfg);
}
