/**
 * Llama-family weights as the GGUF file llama.cpp's converter (convert_hf_to_gguf.py: LlamaModel, Qwen2Model,
 * Qwen3Model) writes, every tensor F32 (its --outtype f32):
 *   tensors  embed_tokens → token_embd, per layer input_layernorm → attn_norm, q/k/v_proj → attn_q, attn_k, attn_v
 *            (with their biases: Qwen2), q_norm/k_norm → attn_q_norm, attn_k_norm (Qwen3), o_proj → attn_output,
 *            post_attention_layernorm → ffn_norm, gate/up/down_proj → ffn_gate, ffn_up, ffn_down; norm → output_norm;
 *            lm_head → output (untied only); llama3 rope scaling → rope_freqs (the per-frequency divisors).
 *            Linear weights in HF's (out, in) layout, ggml dims [in, out]. For the llama architecture, q and k rows
 *            are permuted from HF's rotate-half layout to the interleaved pairs llama.cpp's normal rotation turns
 *            (the converter's LlamaModel.permute); Qwen2 and Qwen3 keep rotate-half (llama.cpp turns them NEOX-style).
 *   metadata general.*, <arch>.{block_count, context_length, embedding_length, feed_forward_length,
 *            attention.head_count, attention.head_count_kv, attention.key_length, attention.value_length,
 *            attention.layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base}, tokenizer.ggml.* (gpt2-style
 *            byte-level BPE: the vocabulary gguf-gpt2.ts makes for a vocabulary of this size — the peers are given
 *            token ids, so only its size matters).
 * The project's layout (llama.ts) streams q, k, v as one input-first matrix (and gate, up as one): each is gathered
 * whole, a layer's at a time, and split back.
 */
import { gpt2Metadata } from "./gguf-gpt2.ts";
import { GGML_TYPE_F32, writeGGUF, type GGUFTensorInfo, type GGUFValue } from "./gguf.ts";
import {
  inverseFrequencies,
  kvWidth,
  llamaParameters,
  queryWidth,
  type LlamaConfig,
  type LlamaWeights,
} from "../model/llama.ts";
import { numel } from "../model/safetensors.ts";
import { transposed } from "../model/parameters.ts";

const u32 = (value: number): GGUFValue => ({ kind: "u32", value });
const f32 = (value: number): GGUFValue => ({ kind: "f32", value });
const str = (value: string): GGUFValue => ({ kind: "string", value });

export function llamaMetadata(cfg: LlamaConfig): [string, GGUFValue][] {
  const arch = cfg.arch === "mistral" ? "llama" : cfg.arch;
  const tokenizer = gpt2Metadata({
    name: cfg.name,
    n_layer: cfg.n_layer,
    n_head: cfg.n_head,
    n_embd: cfg.n_embd,
    n_positions: cfg.n_positions,
    vocab_size: cfg.vocab_size,
    layer_norm_epsilon: cfg.rms_norm_eps,
  }).filter(([k]) => k.startsWith("tokenizer."));
  return [
    ["general.architecture", str(arch)],
    ["general.type", str("model")],
    ["general.name", str(cfg.name)],
    [`${arch}.block_count`, u32(cfg.n_layer)],
    [`${arch}.context_length`, u32(cfg.n_positions)],
    [`${arch}.embedding_length`, u32(cfg.n_embd)],
    [`${arch}.feed_forward_length`, u32(cfg.intermediate_size)],
    [`${arch}.attention.head_count`, u32(cfg.n_head)],
    [`${arch}.attention.head_count_kv`, u32(cfg.n_kv_head)],
    [`${arch}.attention.key_length`, u32(cfg.head_dim)],
    [`${arch}.attention.value_length`, u32(cfg.head_dim)],
    [`${arch}.attention.layer_norm_rms_epsilon`, f32(cfg.rms_norm_eps)],
    [`${arch}.rope.dimension_count`, u32(cfg.head_dim)],
    [`${arch}.rope.freq_base`, f32(cfg.rope_theta)],
    ["general.file_type", u32(GGML_TYPE_F32)],
    ...tokenizer,
    ["general.quantization_version", u32(2)],
  ];
}

/** What one project parameter becomes: the GGUF tensors it is split into (rows of its (in, out) matrix's columns). */
interface Written {
  /** GGUF name and HF-layout (out, in) shape of each part, in order; a vector part has shape [n] */
  parts: { name: string; rows: number; permute: boolean }[];
  /** the project parameter is a (in, out) matrix to transpose (false: a vector or a (V, C) table, written as is) */
  matrix: boolean;
}

function layout(cfg: LlamaConfig): Map<string, Written> {
  const Q = queryWidth(cfg),
    KV = kvWidth(cfg),
    I = cfg.intermediate_size;
  const permute = cfg.arch === "llama" || cfg.arch === "mistral";
  const out = new Map<string, Written>();
  const one = (name: string, matrix = false): Written => ({ parts: [{ name, rows: 0, permute: false }], matrix });
  out.set("embed_tokens.weight", one("token_embd.weight"));
  for (let l = 0; l < cfg.n_layer; l++) {
    const b = `blk.${l}`;
    out.set(`layers.${l}.input_layernorm.weight`, one(`${b}.attn_norm.weight`));
    out.set(`layers.${l}.qkv.weight`, {
      parts: [
        { name: `${b}.attn_q.weight`, rows: Q, permute },
        { name: `${b}.attn_k.weight`, rows: KV, permute },
        { name: `${b}.attn_v.weight`, rows: KV, permute: false },
      ],
      matrix: true,
    });
    if (cfg.qkv_bias)
      out.set(`layers.${l}.qkv.bias`, {
        parts: [
          { name: `${b}.attn_q.bias`, rows: Q, permute: false },
          { name: `${b}.attn_k.bias`, rows: KV, permute: false },
          { name: `${b}.attn_v.bias`, rows: KV, permute: false },
        ],
        matrix: false,
      });
    if (cfg.qk_norm) {
      out.set(`layers.${l}.q_norm.weight`, one(`${b}.attn_q_norm.weight`));
      out.set(`layers.${l}.k_norm.weight`, one(`${b}.attn_k_norm.weight`));
    }
    out.set(`layers.${l}.o_proj.weight`, one(`${b}.attn_output.weight`, true));
    out.set(`layers.${l}.post_attention_layernorm.weight`, one(`${b}.ffn_norm.weight`));
    out.set(`layers.${l}.gate_up.weight`, {
      parts: [
        { name: `${b}.ffn_gate.weight`, rows: I, permute: false },
        { name: `${b}.ffn_up.weight`, rows: I, permute: false },
      ],
      matrix: true,
    });
    out.set(`layers.${l}.down.weight`, one(`${b}.ffn_down.weight`, true));
  }
  out.set("norm.weight", one("output_norm.weight"));
  if (!cfg.tie_word_embeddings) out.set("lm_head.weight", one("output.weight"));
  return out;
}

/** llama3 scaling's per-frequency divisors (the converter's rope_freqs): plain frequency over the scaled one. */
export function ropeFactors(cfg: LlamaConfig): Float32Array | null {
  if (!cfg.rope_scaling) return null;
  const plain = inverseFrequencies({ ...cfg, rope_scaling: null });
  const scaled = inverseFrequencies(cfg);
  return Float32Array.from(plain, (f, i) => f / scaled[i]!);
}

/** HF's rotate-half rows of each of `heads` heads → interleaved pairs (the converter's permute). */
function permuteHeads(w: Float32Array, heads: number, cols: number): Float32Array {
  const rows = w.length / cols,
    hd = rows / heads,
    half = hd / 2;
  const out = new Float32Array(w.length);
  for (let h = 0; h < heads; h++)
    for (let s = 0; s < 2; s++)
      for (let j = 0; j < half; j++)
        out.set(
          w.subarray((h * hd + s * half + j) * cols, (h * hd + s * half + j + 1) * cols),
          (h * hd + 2 * j + s) * cols,
        );
  return out;
}

/**
 * Why llama.cpp would not load this config's GGUF, or null: its qwen2 loader takes the q projection as hidden ×
 * hidden (heads × head_dim = hidden_size), which Qwen2 checkpoints are; llama and qwen3 read key_length.
 */
export function llamaCppRefuses(cfg: LlamaConfig): string | null {
  const q = cfg.n_head * cfg.head_dim;
  if (cfg.arch === "qwen2" && q !== cfg.n_embd)
    return `llama.cpp's qwen2 loader takes heads × head_dim = hidden_size, and ${cfg.name}'s is ${cfg.n_head} × ${cfg.head_dim} = ${q} against ${cfg.n_embd}`;
  return null;
}

/** Writes `w` as an all-F32 GGUF file of its architecture at `path`; returns the file's size in bytes. */
export function writeLlamaGGUF(w: LlamaWeights, path: string, alignment?: number): number {
  const cfg = w.config;
  const written = layout(cfg);
  const specs = llamaParameters(cfg);
  const C = cfg.n_embd;
  const tensors: GGUFTensorInfo[] = [];
  for (const spec of specs) {
    const how = written.get(spec.name);
    if (!how) continue; // zero biases of a checkpoint without them
    if (how.parts.length === 1) {
      const shape = how.matrix ? [spec.shape[1]!, spec.shape[0]!] : spec.shape; // (out, in) for a matrix
      tensors.push({ name: how.parts[0]!.name, dims: [...shape].reverse() });
    } else {
      for (const p of how.parts) tensors.push({ name: p.name, dims: how.matrix ? [C, p.rows] : [p.rows] });
    }
  }
  const factors = ropeFactors(cfg);
  if (factors) tensors.push({ name: "rope_freqs.weight", dims: [factors.length] });
  let gathering: Float32Array | null = null;
  return writeGGUF(
    path,
    llamaMetadata(cfg),
    tensors,
    (emit) => {
      w.stream((spec, chunk, offset) => {
        const how = written.get(spec.name);
        if (!how) return;
        if (!how.matrix && how.parts.length === 1) return emit(chunk);
        gathering ??= new Float32Array(numel(spec.shape));
        gathering.set(chunk, offset);
        if (offset + chunk.length < gathering.length) return;
        const whole = gathering;
        gathering = null;
        if (!how.matrix) {
          let at = 0; // biases: q | k | v end to end, one tensor each
          for (const p of how.parts) {
            emit(whole.subarray(at, at + p.rows));
            at += p.rows;
          }
          return;
        }
        const [inDim, outDim] = [spec.shape[0]!, spec.shape[1]!];
        const t = transposed(whole, inDim, outDim); // (out, in)
        let row0 = 0;
        for (const p of how.parts.length === 1 ? [{ ...how.parts[0]!, rows: outDim }] : how.parts) {
          const part = t.subarray(row0 * inDim, (row0 + p.rows) * inDim);
          const heads = p.name.endsWith("attn_q.weight") ? cfg.n_head : cfg.n_kv_head;
          emit(p.permute ? permuteHeads(part, heads, inDim) : part);
          row0 += p.rows;
        }
      });
      if (factors) emit(factors);
    },
    alignment,
  );
}
