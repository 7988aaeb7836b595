// The decode step's operations: one C ABI shared by every backend.
//
// libgpt2_cpu.so implements each op_* on the host (the CPU twins, cuda/<family>.cpp);
// libgpt2_cuda.so implements each op_* as one kernel launch on the runtime's current stream
// (cuda/<family>.cu); libgpt2_emu.so is the same .cu sources compiled with g++ against
// cuda/emu/cuda_emu.h, so the kernels' code runs on the CPU.
//
// Conventions (llm.c style): outputs first, then inputs, then sizes, every tensor row-major with its shape in
// the comment. C = n_embd, OC = output channels, V = vocab size, max_ctx = n_positions (rows in each KV cache).
//
// Batches: a step runs B independent sequences of T new rows each (decode: T = 1; prefill and the uncached
// baseline: B = 1), their rows sequence-major (row b * T + t); `rows` = B * T where only the count matters.
// Every op computes each row exactly as it would for that row alone (for linear with rows <= MAX_BATCH, summed
// in the same order), so a batch of up to MAX_BATCH sequences gives each the bits it gets on its own.
//
// Storage types (DTYPE_F32, DTYPE_BF16, DTYPE_F16 in op_table.h): weight matrices and embedding tables are
// stored in `wdtype`, the KV cache in `kvdtype`; activations, biases and layer-norm parameters are fp32, and
// every sum is taken in fp32. A value stored as bf16/f16 is the fp32 result rounded to nearest even; a load
// widens it exactly. A backend that cannot run a dtype or batch records cudaErrorInvalidValue (the CPU's
// cpuErrorInvalidValue) and writes nothing.
//
// Position and tokens live in memory the kernels read, never in launch arguments, so one captured
// CUDA graph serves every context length. For sequence b:
//   state: int32[B][STATE_INTS]; state[b][STATE_POS] = position of the sequence's first row in this step.
//   seq:   int32[B][max_ctx + 1]; the token at every position of the sequence (prompt, then generated).
//   k_cache, v_cache: [B][max_ctx][kv_C] in kvdtype (one pair per layer; kv_C below).
//
// The op list itself is src/ops.ts: build/include/op_table.h is generated from it (STATE_POS, STATE_INTS, the
// dtypes, the opcodes), and cuda/plan.cpp checks at compile time that every prototype below matches its row.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "op_table.h"

#ifdef __cplusplus
// Whether a wdtype/kvdtype code is one of the storage types above: what every op checks before it writes anything.
inline bool is_storage_type(int dtype) { return dtype == DTYPE_F32 || dtype == DTYPE_BF16 || dtype == DTYPE_F16; }
#endif

#ifdef __cplusplus
extern "C" {
#endif

// out: (B·T, C) = wte[seq_b[pos_b + t]] + wpe[pos_b + t]       wte: (V, C)  wpe: (max_ctx, C), both in wdtype;
// without a position table (wpe null: rotary models) out = wte[seq_b[pos_b + t]]
void op_embed(float* out, const int* seq, const int* state, const void* wte, const void* wpe, int B, int T, int C,
              int max_ctx, int wdtype);

// out: (rows, C) = (inp - mean) / sqrt(var + eps) * weight + bias      inp: (rows, C)  weight, bias: (C)
void op_layernorm(float* out, const float* inp, const float* weight, const float* bias, int rows, int C, float eps);

// partials: op_partials_bytes(max_rows, max_in, max_out, V) bytes of backend memory, zeroed before its first use,
// for the ops whose blocks merge per-block partial results in one launch (linear with few rows, argmax, the fused
// decode ops below) with at most max_rows rows (B·T of a linear — a prefill's T rows too —, sequences of the others),
// C <= max_in, OC <= max_out and vocabularies <= V.
// Those ops share one such buffer in stream order; each leaves it ready for the next. The CPU library ignores it
// (and asks for 0 bytes).
size_t op_partials_bytes(int max_rows, int max_in, int max_out, int V);

// out: (rows, OC) = inp (rows, C) @ weight (C, OC) + bias (OC)    weight in wdtype, in the library's matrix layout
// (runtime.h be_upload_matrix): as written, input-first (HF Conv1D), on a GPU; out-major, (OC, C), in the CPU library
void op_linear(float* out, float* partials, const float* inp, const void* weight, const float* bias, int rows, int C,
               int OC, int wdtype);

// The attention's shape: C = n_head·hs query columns and kv_C = n_kv_head·hs key (and value) columns, a qkv row
// [q (C) | k (kv_C) | v (kv_C)]; multi-head attention has n_kv_head = n_head (kv_C = C; a GPT-2 checkpoint, C =
// n_embd), grouped-query attention fewer K/V heads, each shared by n_head / n_kv_head query heads.

// Append each sequence's new keys and values to its caches at rows [pos_b, pos_b + T) (those below max_ctx).
// k_cache, v_cache: (B, max_ctx, kv_C) in kvdtype   qkv: (B·T, C + 2 kv_C) as [q | k | v]
void op_kv_append(void* k_cache, void* v_cache, const float* qkv, const int* state, int B, int T, int C, int kv_C,
                  int max_ctx, int kvdtype);

// Causal attention of each sequence's T new queries against its own cache rows [0, pos_b + t] (no stored mask).
// out: (B·T, C)   qkv: (B·T, C + 2 kv_C) (only q is read)   k_cache, v_cache: (B, max_ctx, kv_C) in kvdtype; query
// head h in columns [h*hs, (h+1)*hs) of q and out, reading K/V head h / (n_head / n_kv_head)
// scratch: op_attention_scratch_bytes(rows, ...) bytes of backend memory for split-key partials (may be unused),
// for steps of at most `rows` = B·T rows of the same heads and max_ctx.
void op_attention(float* out, float* scratch, const float* qkv, const void* k_cache, const void* v_cache,
                  const int* state, int B, int T, int C, int n_head, int n_kv_head, int max_ctx, int kvdtype);
size_t op_attention_scratch_bytes(int rows, int C, int n_head, int n_kv_head, int max_ctx);

// out: (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's gelu_new)
void op_gelu(float* out, const float* inp, int N);

// out: (rows, I) = silu(gate) * up, silu(g) = g / (1 + e^-g)     gate_up: (rows, 2I), each row [gate (I) | up (I)]
void op_swiglu(float* out, const float* gate_up, int rows, int I);

// out: (rows, C) = inp / sqrt(mean(inp^2) + eps) * weight     inp: (rows, C)  weight: (C)    (RMSNorm; C <= 4096 on
// CUDA)
void op_rmsnorm(float* out, const float* inp, const float* weight, int rows, int C, float eps);

// Rotary position embedding of the q and k heads of qkv (B·T, C + 2 kv_C), in place, at each row's position
// p = pos_b + t (below max_ctx), in the rotate-half layout: pairs (i, i + hs/2) of each head turn by p·f_i,
//   x_i' = x_i cos - x_{i+hs/2} sin,   x_{i+hs/2}' = x_{i+hs/2} cos + x_i sin,
// with rope: (max_ctx, hs) = [cos(p·f_0 .. p·f_{hs/2-1}) | sin(...)] per position. q_norm, k_norm: (hs), or both null:
// each q (k) head is first RMS-normalised with eps and scaled by q_norm (k_norm) (Qwen3). hs even, <= 256.
void op_rope(float* qkv, const int* state, const float* rope, const float* q_norm, const float* k_norm, int B, int T,
             int C, int n_head, int n_kv_head, int max_ctx, float eps);

// out: (N) = a + b   (out may alias a or b)
void op_residual(float* out, const float* a, const float* b, int N);

// logits: (B, V) = each sequence's last row inp[b·T + T - 1] (C) @ wte (V, C)^T    (LM head, tied embedding in wdtype)
void op_lm_head(float* logits, const float* inp, const void* wte, int B, int T, int C, int V, int wdtype);

// For each sequence b: seq_b[pos_b + T] = argmax(logits_b) (written only if pos_b + T <= max_ctx); state_b[STATE_POS]
// += T. logits: (B, V). The lowest index wins a tie; a NaN logit is never chosen (it compares false with everything),
// and the token is 0 when every logit is NaN.
void op_argmax(int* seq, int* state, float* partials, const float* logits, int B, int V, int T, int max_ctx);

// ---- fused decode ops: one row per sequence (T = 1); each is a chain of the ops above in one launch ---------
// Layer norms here use C <= 4096 (float rows) on CUDA.

// qkv: (B, C + 2 kv_C) = layernorm(x) @ weight (C, C + 2 kv_C) + bias, each row [q (C) | k (kv_C) | v (kv_C)]; then k
// and v to row pos_b of sequence b's k_cache, v_cache ((B, max_ctx, kv_C), if pos_b < max_ctx): op_layernorm,
// op_linear, op_kv_append.     x: (B, C)  ln_weight, ln_bias: (C)
void op_ln_qkv(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x, const float* ln_weight,
               const float* ln_bias, const void* weight, const float* bias, const int* state, int B, int C, int kv_C,
               int max_ctx, float eps, int wdtype, int kvdtype);

// out: (B, OC) = gelu(layernorm(x) @ weight (C, OC) + bias): op_layernorm, op_linear, op_gelu.
void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight, const float* ln_bias,
                       const void* weight, const float* bias, int B, int C, int OC, float eps, int wdtype);

// x: (B, OC) = x + (inp (B, C) @ weight (C, OC) + bias): op_linear, op_residual.
void op_linear_residual(float* x, float* partials, const float* inp, const void* weight, const float* bias, int B,
                        int C, int OC, int wdtype);

// logits: (B, V) = layernorm(x) @ wte (V, C)^T, then each sequence's next token as op_argmax with T = 1:
// op_layernorm, op_lm_head, op_argmax.
void op_ln_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                          const float* ln_bias, const void* wte, int B, int C, int V, int max_ctx, float eps,
                          int wdtype);

// The Llama family's fused decode ops (B sequences of one row); RMSNorm here uses C <= 4096 (float rows) on CUDA.

// qkv: (B, Q + 2 KV) = rmsnorm(x) @ weight (C, Q + 2 KV) + bias, Q = n_head·head_dim, KV = n_kv_head·head_dim; then
// q and k turned at pos_b (op_rope, each head RMS-normalised by q_norm / k_norm first where they are given) and k, v
// to row pos_b of sequence b's k_cache, v_cache (if pos_b < max_ctx): op_rmsnorm, op_linear, op_rope, op_kv_append.
// head_dim a multiple of 8 on CUDA.
void op_rms_qkv_rope(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x, const float* ln_weight,
                     const void* weight, const float* bias, const int* state, const float* rope, const float* q_norm,
                     const float* k_norm, int B, int C, int n_head, int n_kv_head, int head_dim, int max_ctx, float eps,
                     int wdtype, int kvdtype);

// out: (B, I) = silu(g) * u, [g | u] = rmsnorm(x) @ weight (C, 2I) + bias: op_rmsnorm, op_linear, op_swiglu. I a
// multiple of 4 on CUDA.
void op_rms_gate_up(float* out, float* partials, const float* x, const float* ln_weight, const void* weight,
                    const float* bias, int B, int C, int I, float eps, int wdtype);

// logits: (B, V) = rmsnorm(x) @ wte (V, C)^T, then each sequence's next token as op_argmax with T = 1:
// op_rmsnorm, op_lm_head, op_argmax.
void op_rms_lm_head_argmax(float* logits, int* seq, int* state, float* partials, const float* x, const float* ln_weight,
                           const void* wte, int B, int C, int V, int max_ctx, float eps, int wdtype);

#ifdef __cplusplus
}
#endif
