/**
 * GPT-2 weights as the GGUF file llama.cpp's converter (convert_hf_to_gguf.py, GPT2Model) writes, every
 * tensor F32 (its --outtype f32):
 *   tensors  wte → token_embd (no separate output: llama.cpp reuses token_embd, the tied head), wpe →
 *            position_embd, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj} →
 *            blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm, ffn_up, ffn_down}, ln_f → output_norm;
 *            Conv1D weights (in, out) transposed to (out, in) as the converter does
 *   metadata general.*, gpt2.{block_count, context_length, embedding_length, feed_forward_length,
 *            attention.head_count, attention.layer_norm_epsilon}, tokenizer.ggml.* (model "gpt2", pre "gpt-2",
 *            tokens, token types, merges, bos/eos/unk = <|endoftext|>)
 * A vocabulary smaller than GPT-2's (the test fixtures) takes r50k's first ids and the merges that make them.
 */
import { checkOneKvHeadPerQueryHead, type GPT2Config, parameterSpecs, type GPT2Weights } from "../model/gpt2.ts";
import { gpt2Vocab } from "../model/gpt2-vocab.ts";
import { GGML_TYPE_F32, writeGGUF, type GGUFTensorInfo, type GGUFValue } from "./gguf.ts";
import { numel } from "../model/safetensors.ts";
import { END_OF_TEXT_ID } from "../model/tokenizer.ts";
import { transposed, type ParameterSpec } from "../model/parameters.ts";

/** gguf-py's TokenType */
export const TokenType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;
/** LlamaFileType.ALL_F32 */
const FILE_TYPE_ALL_F32 = GGML_TYPE_F32;
const GGML_QUANT_VERSION = 2;
/** r50k tokens 0..255 are the single bytes; merge i makes token 256 + i */
const BYTE_TOKENS = 256;

const u32 = (value: number): GGUFValue => ({ kind: "u32", value });
const str = (value: string): GGUFValue => ({ kind: "string", value });

/** Tokens, types, merges and special ids for a vocabulary of `V` ids. */
export function vocabularyFor(V: number): {
  tokens: string[];
  types: number[];
  merges: string[];
  endOfText: number | null;
} {
  const full = gpt2Vocab();
  const ids = Array.from({ length: V }, (_, i) => i);
  const tokens = ids.map((i) => full.tokens[i] ?? `[PAD${i}]`);
  const types = ids.map((i) =>
    i === END_OF_TEXT_ID ? TokenType.CONTROL : i < full.tokens.length ? TokenType.NORMAL : TokenType.UNUSED,
  );
  const merges = full.merges.slice(0, Math.max(0, Math.min(V, END_OF_TEXT_ID) - BYTE_TOKENS));
  return { tokens, types, merges, endOfText: V > END_OF_TEXT_ID ? END_OF_TEXT_ID : null };
}

export function gpt2Metadata(cfg: GPT2Config): [string, GGUFValue][] {
  checkOneKvHeadPerQueryHead(cfg, "a GGUF file");
  const vocab = vocabularyFor(cfg.vocab_size);
  const special: [string, GGUFValue][] =
    vocab.endOfText === null
      ? []
      : [
          ["tokenizer.ggml.bos_token_id", u32(vocab.endOfText)],
          ["tokenizer.ggml.eos_token_id", u32(vocab.endOfText)],
          ["tokenizer.ggml.unknown_token_id", u32(vocab.endOfText)],
        ];
  return [
    ["general.architecture", str("gpt2")],
    ["general.type", str("model")],
    ["general.name", str(cfg.name)],
    ["gpt2.block_count", u32(cfg.n_layer)],
    ["gpt2.context_length", u32(cfg.n_positions)],
    ["gpt2.embedding_length", u32(cfg.n_embd)],
    ["gpt2.feed_forward_length", u32(4 * cfg.n_embd)],
    ["gpt2.attention.head_count", u32(cfg.n_head)],
    ["gpt2.attention.layer_norm_epsilon", { kind: "f32", value: cfg.layer_norm_epsilon }],
    ["general.file_type", u32(FILE_TYPE_ALL_F32)],
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str("gpt-2")],
    ["tokenizer.ggml.tokens", { kind: "array", of: "string", values: vocab.tokens }],
    ["tokenizer.ggml.token_type", { kind: "array", of: "i32", values: vocab.types }],
    ["tokenizer.ggml.merges", { kind: "array", of: "string", values: vocab.merges }],
    ...special,
    ["general.quantization_version", u32(GGML_QUANT_VERSION)],
  ];
}

/** Hugging Face names (no prefix) → llama.cpp's GPT-2 names. */
const RENAMES: [RegExp, string][] = [
  [/^wte\./, "token_embd."],
  [/^wpe\./, "position_embd."],
  [/^h\.(\d+)\.ln_1\./, "blk.$1.attn_norm."],
  [/^h\.(\d+)\.attn\.c_attn\./, "blk.$1.attn_qkv."],
  [/^h\.(\d+)\.attn\.c_proj\./, "blk.$1.attn_output."],
  [/^h\.(\d+)\.ln_2\./, "blk.$1.ffn_norm."],
  [/^h\.(\d+)\.mlp\.c_fc\./, "blk.$1.ffn_up."],
  [/^h\.(\d+)\.mlp\.c_proj\./, "blk.$1.ffn_down."],
  [/^ln_f\./, "output_norm."],
];
/** Conv1D weights: stored (in, out), written (out, in) */
const CONV1D_WEIGHT = /\.(c_attn|c_proj|c_fc)\.weight$/;

/** One GGUF tensor per parameter, in checkpoint order: its name, its ggml dims, and whether it is transposed. */
export function gpt2Tensors(cfg: GPT2Config): (GGUFTensorInfo & { spec: ParameterSpec; transpose: boolean })[] {
  return parameterSpecs(cfg).map((spec) => {
    const rule = RENAMES.find(([from]) => from.test(spec.name));
    if (!rule) throw new Error(`gguf: no llama.cpp name for ${spec.name}`);
    const transpose = CONV1D_WEIGHT.test(spec.name);
    // ggml dims run from the contiguous dimension: a row-major (rows, cols) array is [cols, rows]; transposed, [rows, cols]
    const dims = transpose ? [...spec.shape] : [...spec.shape].reverse();
    return { name: spec.name.replace(rule[0], rule[1]), dims, spec, transpose };
  });
}

/**
 * Writes `w` as an all-F32 GPT-2 GGUF file at `path`, streaming the parameters in; a Conv1D weight is gathered
 * whole (one at a time) to be transposed. Returns the file's size in bytes.
 */
export function writeGPT2GGUF(w: GPT2Weights, path: string, alignment?: number): number {
  const tensors = gpt2Tensors(w.config);
  const transposedNames = new Set(tensors.filter((t) => t.transpose).map((t) => t.spec.name));
  let gathering: Float32Array | null = null;
  return writeGGUF(
    path,
    gpt2Metadata(w.config),
    tensors,
    (emit) =>
      w.stream((spec, chunk, offset) => {
        if (!transposedNames.has(spec.name)) return emit(chunk);
        gathering ??= new Float32Array(numel(spec.shape));
        gathering.set(chunk, offset);
        if (offset + chunk.length < gathering.length) return;
        emit(transposed(gathering, spec.shape[0]!, spec.shape[1]!));
        gathering = null;
      }),
    alignment,
  );
}
