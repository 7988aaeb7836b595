// What the model layer knows of an architecture: one ModelFamily per architecture file (gpt2.ts, llama.ts), listed
// by the registry in architectures.ts.
import type { ChunkVisitor, ParameterSpec } from "./parameters.ts";

/** A model's weights as any architecture holds them: streamed in placement order, whole parameters as fp32 chunks. */
export interface FamilyWeights<C> {
  config: C;
  source: string;
  skipped: { tensors: number; bytes: number; names: string[] };
  stream(visit: ChunkVisitor): void;
}

/** One architecture (or family of them sharing a layout): its config keys, weights, presets and shape facts. */
export interface ModelFamily<C extends { name: string }, W extends FamilyWeights<C>> {
  /** the Hugging Face `architectures` names it runs, each with the `model_type` it implies */
  architectures: Readonly<Record<string, string>>;
  /** the label decoder shapes carry (model/kv.ts) */
  shapeFamily: "gpt2" | "llama-style";
  /** whether positions come from a rotation (caches and tables sized by the run's context) or a learned table */
  rotary: boolean;
  presets: Readonly<Record<string, C>>;
  /** whether a config is of this family */
  owns(cfg: object): boolean;
  /** the `model_type` a config stands for (the Llama family's four; GPT-2's one) */
  modelType(cfg: C): string;
  /** config.json's object, its model_type from `architectures`; every bad key one line naming `path` */
  configOf(raw: Record<string, unknown>, modelType: string, path: string, dir: string): C;
  /** a checkpoint directory's weights, streamed */
  load(dir: string, cfg: C): W;
  randomWeights(cfg: C, seed: number): W;
  /** writes the weights back as a Hugging Face checkpoint directory the loader reads (the peers load those) */
  save(w: W, dir: string): void;
  /** exact, a tied output embedding counted once */
  parameterCount(cfg: C): number;
  /** how parameterCount counts, for the kv report */
  parametersHow(cfg: C): string;
  headDim(cfg: C): number;
  /** the config key that sets n_positions, with its value, as error lines name it (e.g. "n_positions 1024") */
  positionsLimit(cfg: C): string;
  kvHeads(cfg: C): number;
  /** the config with `kvHeads` K/V heads, everything else the same (profile --kv-heads) */
  withKvHeads(cfg: C, kvHeads: number): C;
  /** the parameters as a backend holds them (name, shape, init), in placement order */
  placedParameters(cfg: C): ParameterSpec[];
  /** a decode step's matvecs as (name, in, out), one layer's, in the project's layout */
  linears(cfg: C): Array<[string, number, number]>;
}
