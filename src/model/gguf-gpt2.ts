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
import type { GPT2Config } from "./config.ts";
import { gpt2Vocab } from "./gpt2-vocab.ts";
import { GGML_TYPE_F32, writeGGUF, type GGUFTensor, type GGUFValue } from "./gguf.ts";
import { END_OF_TEXT_ID } from "./tokenizer.ts";
import type { GPT2Weights, Linear, Norm } from "./weights.ts";

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
export function vocabularyFor(V: number): { tokens: string[]; types: number[]; merges: string[]; endOfText: number | null } {
  const full = gpt2Vocab();
  const ids = Array.from({ length: V }, (_, i) => i);
  const tokens = ids.map((i) => full.tokens[i] ?? `[PAD${i}]`);
  const types = ids.map((i) => (i === END_OF_TEXT_ID ? TokenType.CONTROL : i < full.tokens.length ? TokenType.NORMAL : TokenType.UNUSED));
  const merges = full.merges.slice(0, Math.max(0, Math.min(V, END_OF_TEXT_ID) - BYTE_TOKENS));
  return { tokens, types, merges, endOfText: V > END_OF_TEXT_ID ? END_OF_TEXT_ID : null };
}

export function gpt2Metadata(cfg: GPT2Config): [string, GGUFValue][] {
  const vocab = vocabularyFor(cfg.vocab_size);
  const special: [string, GGUFValue][] = vocab.endOfText === null ? [] : [
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

/** out: (cols, rows) = a: (rows, cols) transposed */
function transposed(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}

/** GGUF's tensors of GPT-2, in checkpoint order; dims are ggml's (the contiguous one first). */
export function gpt2Tensors(w: GPT2Weights): GGUFTensor[] {
  const { n_embd: C, vocab_size: V, n_positions: T } = w.config;
  const vector = (name: string, data: Float32Array): GGUFTensor => ({ name, dims: [data.length], data: () => data });
  const norm = (name: string, n: Norm) => [vector(`${name}.weight`, n.weight), vector(`${name}.bias`, n.bias)];
  // Conv1D (in, out) → (out, in): ggml dims [in, out]
  const conv1d = (name: string, l: Linear, inC: number, outC: number) => [
    { name: `${name}.weight`, dims: [inC, outC], data: () => transposed(l.weight, inC, outC) },
    vector(`${name}.bias`, l.bias),
  ];
  return [
    { name: "token_embd.weight", dims: [C, V], data: () => w.wte },
    { name: "position_embd.weight", dims: [C, T], data: () => w.wpe },
    ...w.layers.flatMap((l, i) => [
      ...norm(`blk.${i}.attn_norm`, l.ln_1),
      ...conv1d(`blk.${i}.attn_qkv`, l.attn.c_attn, C, 3 * C),
      ...conv1d(`blk.${i}.attn_output`, l.attn.c_proj, C, C),
      ...norm(`blk.${i}.ffn_norm`, l.ln_2),
      ...conv1d(`blk.${i}.ffn_up`, l.mlp.c_fc, C, 4 * C),
      ...conv1d(`blk.${i}.ffn_down`, l.mlp.c_proj, 4 * C, C),
    ]),
    ...norm("output_norm", w.ln_f),
  ];
}

/** Writes `w` as an all-F32 GPT-2 GGUF file at `path`; returns its size in bytes. */
export function writeGPT2GGUF(w: GPT2Weights, path: string, alignment?: number): number {
  return writeGGUF(path, gpt2Metadata(w.config), gpt2Tensors(w), alignment);
}
