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

// out: (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC)    weight in HF Conv1D layout (input dim first)
void op_linear(float* out, const float* inp, const float* weight, const float* bias, int T, int C, int OC);

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

// seq[pos + T] = argmax(logits) (lowest index on ties; written only if pos + T <= max_ctx); state[STATE_POS] += T
// logits: (V)
void op_argmax(int* seq, int* state, const float* logits, int V, int T, int max_ctx);

#ifdef __cplusplus
}
#endif
