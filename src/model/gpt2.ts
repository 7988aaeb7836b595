// GPT-2 as one of the architectures (architectures.ts): its config keys (config.ts), its weights' names and the
// project's layout of them (weights.ts), its presets.
import { headSize, parameterCount, PRESETS, readHFConfig, type GPT2Config } from "./config.ts";
import type { ModelFamily } from "./family.ts";
import { loadModel, parameterSpecs, randomWeights, saveModel, type GPT2Weights } from "./weights.ts";

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
    "exact for GPT-2: embeddings (vocab + positions) × n_embd, 12·C² + 13·C per block, final LayerNorm; the output head is tied to the embeddings",
  headDim: headSize,
  kvHeads: (cfg) => cfg.n_head,
  withKvHeads: (cfg, kvHeads) => (kvHeads === cfg.n_head ? cfg : null), // c_attn holds one K/V head per query head
  placedParameters: parameterSpecs,
  linears: ({ n_embd: C }) => [
    ["c_attn", C, 3 * C],
    ["attn.c_proj", C, C],
    ["c_fc", C, 4 * C],
    ["mlp.c_proj", 4 * C, C],
  ],
};
