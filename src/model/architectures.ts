/**
 * The architectures this project runs, by the `architectures` / `model_type` of a Hugging Face config.json: one
 * row per family, GPT-2 (gpt2.ts) and the Llama family (llama.ts). Each layer above keeps its own table keyed by
 * FamilyName (plans.ts, run/session.ts, peers/peer-set.ts), so a family without its row there does not compile.
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { UserError } from "../errors.ts";
import type { ModelFamily } from "./family.ts";
import { parseJsonObject } from "./files.ts";
import { GPT2_FAMILY, type GPT2Config, type GPT2Weights } from "./gpt2.ts";
import { LLAMA_FAMILY, type LlamaConfig, type LlamaWeights } from "./llama.ts";
import type { ParameterSpec } from "./parameters.ts";

export type ModelConfig = GPT2Config | LlamaConfig;
export type ModelWeights = GPT2Weights | LlamaWeights;

/** The registry: every architecture family the project runs. */
export const MODEL_FAMILIES = { gpt2: GPT2_FAMILY, llama: LLAMA_FAMILY } as const;
export type FamilyName = keyof typeof MODEL_FAMILIES;
type AnyFamily = ModelFamily<ModelConfig, ModelWeights>;
const FAMILY_NAMES = Object.keys(MODEL_FAMILIES) as FamilyName[];
const familyNamed = (name: FamilyName): AnyFamily => MODEL_FAMILIES[name] as AnyFamily;

/** The family a config belongs to. */
export function familyNameOf(cfg: ModelConfig): FamilyName {
  const name = familyNameIfAny(cfg);
  if (!name) throw new Error(`familyNameOf: ${cfg.name} belongs to no registered family`);
  return name;
}

/** The family a config belongs to, or null (a config read from a file, not yet trusted). */
export const familyNameIfAny = (cfg: ModelConfig): FamilyName | null =>
  FAMILY_NAMES.find((n) => familyNamed(n).owns(cfg)) ?? null;

export const familyOf = (cfg: ModelConfig): AnyFamily => familyNamed(familyNameOf(cfg));

/** The HF architecture names, with their model_type. */
export const ARCHITECTURES: Readonly<Record<string, string>> = Object.assign(
  {},
  ...FAMILY_NAMES.map((n) => familyNamed(n).architectures),
);

/** Every preset, by name. */
export const ALL_PRESETS: Readonly<Record<string, ModelConfig>> = Object.assign(
  {},
  ...FAMILY_NAMES.map((n) => familyNamed(n).presets),
);

/**
 * Refuses a config.json whose `architectures[0]`, one this project knows, belongs to another model_type than its
 * `model_type`: HF's Auto classes build a model from model_type, so no reading of such a config can be vouched for.
 */
export function checkNamesAgree(raw: Record<string, unknown>, where: string): void {
  const named = Array.isArray(raw.architectures) ? String(raw.architectures[0]) : "";
  const itsType = ARCHITECTURES[named];
  if (itsType !== undefined && raw.model_type !== undefined && raw.model_type !== itsType)
    throw new UserError(
      `${where}: architectures names ${named} (model_type "${itsType}") but model_type is ${JSON.stringify(raw.model_type)}`,
    );
}

/**
 * The supported model type a config names: its first `architectures` entry's, else its model_type; GPT-2 where it
 * names neither and has GPT-2's keys (checkpoints from before `architectures`); undefined for any other.
 */
export function supportedModelType(raw: Record<string, unknown>): string | undefined {
  const names = Array.isArray(raw.architectures) ? raw.architectures : [];
  if (names.length > 0) return ARCHITECTURES[String(names[0])];
  if (raw.model_type === undefined) return "n_embd" in raw ? "gpt2" : undefined;
  return Object.values(ARCHITECTURES).find((t) => t === raw.model_type);
}

/** The family and model_type of a parsed config.json: its `architectures[0]`, else its `model_type`. */
function architectureOf(raw: Record<string, unknown>, path: string): { family: AnyFamily; modelType: string } {
  const names = Array.isArray(raw.architectures) ? raw.architectures : [];
  const modelType = supportedModelType(raw);
  const family = FAMILY_NAMES.map(familyNamed).find((f) => Object.values(f.architectures).includes(modelType ?? ""));
  if (!modelType || !family) {
    const supported = `supported: ${Object.keys(ARCHITECTURES).join(", ")}`;
    if (names.length === 0 && raw.model_type === undefined)
      throw new UserError(
        `${path}: names no architecture (neither architectures nor model_type) and has no n_embd, so it is not GPT-2's (${supported})`,
      );
    const named = names.length > 0 ? JSON.stringify(names[0]) : `model_type ${JSON.stringify(raw.model_type)}`;
    throw new UserError(`${path}: architecture ${named} is not supported (${supported})`);
  }
  checkNamesAgree(raw, path);
  return { family, modelType };
}

/** A checkpoint directory's config.json, parsed, with the family that reads it. */
function openConfig(dir: string) {
  const path = join(dir, "config.json");
  if (!existsSync(path)) throw new UserError(`no config.json in ${dir} (expected a Hugging Face checkpoint directory)`);
  const raw = parseJsonObject(path);
  const { family, modelType } = architectureOf(raw, path);
  return { family, config: family.configOf(raw, modelType, path, dir) };
}

/** Opens a Hugging Face checkpoint directory of any supported architecture. */
export function loadAnyModel(dir: string): ModelWeights {
  if (!existsSync(dir)) throw new UserError(`model directory not found: ${dir}`);
  if (!statSync(dir).isDirectory())
    throw new UserError(`--model takes a directory (with config.json and model.safetensors), not a file: ${dir}`);
  const { family, config } = openConfig(dir);
  return family.load(dir, config);
}

/** The config of any supported checkpoint directory. */
export const readAnyConfig = (dir: string): ModelConfig => openConfig(dir).config;

/** Exact parameter count of any supported model (a tied output embedding counted once). */
export const parameterCountOf = (cfg: ModelConfig): number => familyOf(cfg).parameterCount(cfg);

/** The width of one attention head: head_dim (GPT-2: n_embd / n_head). */
export const headDimOf = (cfg: ModelConfig): number => familyOf(cfg).headDim(cfg);

/** The config key that sets a model's positions, with its value (e.g. "max_position_embeddings 8192"). */
export const positionsLimitOf = (cfg: ModelConfig): string => familyOf(cfg).positionsLimit(cfg);

/** The longest context a cached step can run at: a step at context c writes position c, below n_positions. */
export const largestContextOf = (cfg: Pick<ModelConfig, "n_positions">): number => cfg.n_positions - 1;

/** K/V heads: n_kv_head (a GPT-2 checkpoint: n_head). */
export const kvHeadsOf = (cfg: ModelConfig): number => familyOf(cfg).kvHeads(cfg);

/**
 * The config with its attention reshaped to `kvHeads` K/V heads (a divisor of the query heads), everything else
 * the same: MHA, GQA or MQA of one model (profile --kv-heads).
 */
export const withKvHeads = (cfg: ModelConfig, kvHeads: number): ModelConfig => familyOf(cfg).withKvHeads(cfg, kvHeads);

/** Key and value columns of one layer's cache row: n_kv_head × head_dim (a GPT-2 checkpoint: n_embd). */
export const kvColumns = (cfg: ModelConfig): number => kvHeadsOf(cfg) * headDimOf(cfg);

/** KV cache bytes per token: 2 × layers × kv_heads × head_dim × bytes per element. */
export function kvBytesPerToken(cfg: ModelConfig, bytesPerElement = 4): number {
  return 2 * cfg.n_layer * kvColumns(cfg) * bytesPerElement;
}

/** The parameters as a backend holds them (name, shape, init), in placement order. */
export const placedParameters = (cfg: ModelConfig): ParameterSpec[] => familyOf(cfg).placedParameters(cfg);

/** Seeded random weights of a config's exact shapes. */
export const randomWeightsOf = (cfg: ModelConfig, seed: number): ModelWeights => familyOf(cfg).randomWeights(cfg, seed);

/** Writes weights back as a Hugging Face checkpoint directory their loader reads. */
export const saveAnyModel = (w: ModelWeights, dir: string): void => familyOf(w.config).save(w, dir);
