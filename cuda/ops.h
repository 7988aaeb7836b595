// The decode step's operations: one C ABI shared by every backend.
//
// libgpt2_cpu.so implements each op_* on the host (the CPU twins, cuda/<family>.cpp);
// libgpt2_cuda.so implements each op_* as one kernel launch on the runtime's current stream
// (cuda/<family>.cu); libgpt2_emu.so is the same .cu sources compiled with g++ against
// cuda/emu/cuda_emu.h, so the kernels' code runs on the CPU.
//
// Conventions (llm.c style): outputs first, then inputs, then sizes. Every tensor is fp32,
// row-major, with its shape in the comment. T is the number of new rows in this step, C = n_embd,
// OC = output channels, V = vocab size, max_ctx = n_positions (rows in each KV cache).
//
// Position and tokens live in memory the kernels read, never in launch arguments, so one captured
// CUDA graph serves every context length:
//   state: int32[STATE_INTS]; state[STATE_POS] = position of this step's first row.
//   seq:   int32[max_ctx + 1]; the token at every position of the sequence (prompt, then generated).
//
// The op list itself is src/ops.ts: build/include/op_table.h is generated from it (STATE_POS, STATE_INTS, the
// opcodes), and cuda/plan.cpp checks at compile time that every prototype below matches its row there.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "op_table.h"

#ifdef __cplusplus
extern "C" {
#endif

// out: (T, C) = wte[seq[pos + t]] + wpe[pos + t]       wte: (V, C)  wpe: (max_ctx, C)
void op_embed(float* out, const int* seq, const int* state, const float* wte, const float* wpe, int T, int C);

// out: (T, C) = (inp - mean) / sqrt(var + eps) * weight + bias      inp: (T, C)  weight, bias: (C)
void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int T, int C, float eps);

// partials: op_partials_bytes(max_in, max_out, V) bytes of backend memory, zeroed before its first use, for the
// ops whose blocks merge per-block partial results in one launch (linear at T = 1, argmax, the fused decode ops
// below) with C <= max_in, OC <= max_out and vocabularies <= V. Those ops share one such buffer in stream order;
// each leaves it ready for the next. The CPU library ignores it (and asks for 0 bytes).
size_t op_partials_bytes(int max_in, int max_out, int V);

// out: (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC)    weight in HF Conv1D layout (input dim first)
void op_linear(float* out, float* partials, const float* inp, const float* weight, const float* bias, int T, int C, int OC);

// Append this step's keys and values to the caches at rows [pos, pos + T).
// k_cache, v_cache: (max_ctx, C)   qkv: (T, 3C) as [q | k | v]
void op_kv_append(float* k_cache, float* v_cache, const float* qkv, const int* state, int T, int C, int max_ctx);

// Causal attention of the T new queries against cache rows [0, pos + t] (no stored mask).
// out: (T, C)   qkv: (T, 3C) (only q is read)   k_cache, v_cache: (max_ctx, C), head h in columns [h*hs, (h+1)*hs)
// scratch: op_attention_scratch_bytes(...) bytes of backend memory for split-key partials (may be unused).
void op_attention(float* out, float* scratch, const float* qkv, const float* k_cache, const float* v_cache,
                  const int* state, int T, int C, int n_head, int max_ctx);
size_t op_attention_scratch_bytes(int T, int C, int n_head, int max_ctx);

// out: (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's gelu_new)
void op_gelu(float* out, const float* inp, int N);

// out: (N) = a + b   (out may alias a or b)
void op_residual(float* out, const float* a, const float* b, int N);

// logits: (V) = inp[T - 1] (C) @ wte (V, C)^T    (LM head, tied embedding, last row only)
void op_lm_head(float* logits, const float* inp, const float* wte, int T, int C, int V);

// seq[pos + T] = argmax(logits) (written only if pos + T <= max_ctx); state[STATE_POS] += T
// logits: (V). The lowest index wins a tie; a NaN logit is never chosen (it compares false with everything), and
// the token is 0 when every logit is NaN.
void op_argmax(int* seq, int* state, float* partials, const float* logits, int V, int T, int max_ctx);

// ---- fused decode ops: one row (T = 1); each is a chain of the ops above in one launch ------------------------
// Layer norms here use C <= 4096 (float rows) on CUDA.

// qkv: (3C) = layernorm(x) @ weight (C, 3C) + bias; then the k and v thirds to row pos of k_cache, v_cache
// (if pos < max_ctx): op_layernorm, op_linear, op_kv_append.                   x, ln_weight, ln_bias: (C)
void op_ln_qkv(float* qkv, float* k_cache, float* v_cache, float* partials, const float* x, const float* ln_weight,
               const float* ln_bias, const float* weight, const float* bias, const int* state, int C, int max_ctx,
               float eps);

// out: (OC) = gelu(layernorm(x) @ weight (C, OC) + bias): op_layernorm, op_linear, op_gelu.
void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight, const float* ln_bias,
                       const float* weight, const float* bias, int C, int OC, float eps);

// x: (OC) = x + (inp (C) @ weight (C, OC) + bias): op_linear, op_residual.
void op_linear_residual(float* x, float* partials, const float* inp, const float* weight, const float* bias, int C, int OC);

// logits: (V) = layernorm(x) @ wte (V, C)^T, then the next token as op_argmax with T = 1: op_layernorm,
// op_lm_head, op_argmax.
void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                          const float* ln_bias, const float* wte, int C, int V, int max_ctx, float eps);

#ifdef __cplusplus
}
#endif
