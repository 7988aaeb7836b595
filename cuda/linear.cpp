// CPU twin of linear.cu: out (T, OC) = inp (T, C) @ weight + bias (OC), the weight stored as fp32, bf16 or f16
// (widened as it is read; every sum in fp32) and OUT-MAJOR: (OC, C), row o the weights of output o. The CUDA
// kernels read the same matrix input-first, (C, OC); be_upload_matrix (cpu_runtime.cpp) stores it transposed here.
//
// Few rows (decode, T <= kFewRows): memory-bound. Each output is one contiguous dot product of its weight row with
// every input row (dot_row_each, cpu_math.h), so each thread streams one run of weight rows from memory (measured:
// 1.25x the bytes per second of 8-row bands of an input-first matrix when the host's DRAM reads over 65 GB/s,
// profiles/2026-12-06-cpu-matvec-layouts). A row gets the same bits whatever T is and whichever thread ran it
// (cuda/ops.h).
// Many rows (prefill, the uncached step): compute-bound. A GEMM in the manner of BLIS: each chunk owns a few
// kTileCols-wide column panels of the output and a block of rows; it packs the weight's panels kDepthBlock
// inputs at a time (transposing and widening them to fp32) and runs the register-blocked micro-kernel
// (cpu_math.h) down its rows, every packed panel reused by every row tile.
#include <string.h>

#include <algorithm>
#include <vector>

#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {

constexpr int kFewRows = MAX_BATCH;       // up to this many rows, the few-rows path: a row's sums as alone (ops.h)
constexpr long kDotChunkBytes = 1 << 20;  // few-rows path: weight rows per chunk, ~1 MB of them (the LM head's)
constexpr int kDotChunksPerThread = 4;    // few-rows path: fewer rows per chunk until every thread has this many
constexpr int kDepthBlock = 384;          // weight inputs per packed panel: 96 KB at 64 columns (AVX-512), in L2
constexpr int kMaxPanelsPerChunk = 4;     // a 6-row input tile feeds up to this many packed panels from L1
constexpr int kRowsPerChunk = 512;        // T beyond this is cut into row blocks (each packs its panels again)
constexpr int kChunksPerThread = 3;       // fewer panels per chunk until every thread has this many chunks

int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// out: (T, OC) = inp (T, C) @ weight (OC, C)^T + bias: chunks of weight rows, each row scored against every input
// row while it is in L1. A chunk is one stream from memory, so long ones (1 MB chunks read 0.913x the probe where
// 256 KB ones read 0.828x, fast host, same microbench), but a small matrix is still cut into kDotChunksPerThread
// chunks a thread, for balance.
template <typename S>
void linear_few_rows(float* out, const float* inp, const S* weight, const float* bias, int T, int C, int OC) {
  const float* x[kFewRows];
  for (int t = 0; t < T; t++) x[t] = inp + (size_t)t * C;
  const long by_bytes = kDotChunkBytes / ((long)C * (long)sizeof(S));
  const long rows_per_chunk = std::max(1L, std::min(by_bytes, (long)ceil_div(OC, kDotChunksPerThread * cpu_threads())));
  parallel_range(OC, rows_per_chunk, (long)T * C * OC, [&](long o0, long o1) {
    for (long o = o0; o < o1; o++) dot_row_each(out + o, OC, x, T, weight + o * C, C);
    for (int t = 0; t < T; t++)
      for (long o = o0; o < o1; o++) out[(size_t)t * OC + o] += bias[o];
  });
}

// out[t0:t0+rows, j0:j0+cols] (op)= inp[t0:t0+rows, k0:k0+kc] @ panel, for a panel narrower than kTileCols:
// through a full-width tile so that the micro-kernel never touches columns past OC.
void edge_tile(float* out, int OC, const float* a, int C, const float* panel, int rows, int kc, int cols, TileOut op,
               const float* bias) {
  alignas(64) float tile[kTileRows * kTileCols];
  alignas(64) float bias_row[kTileCols] = {};
  if (op == TileOut::kAdd)
    for (int r = 0; r < rows; r++) memcpy(tile + r * kTileCols, out + (size_t)r * OC, sizeof(float) * cols);
  if (op == TileOut::kStoreBias) memcpy(bias_row, bias, sizeof(float) * cols);
  tile_multiply_rows(rows, kc, {a, (size_t)C, 1}, panel, kTileCols, tile, kTileCols, op, bias_row);
  for (int r = 0; r < rows; r++) memcpy(out + (size_t)r * OC, tile + r * kTileCols, sizeof(float) * cols);
}

// out[t0:t1, panels p0..p1) = inp[t0:t1] @ weight[:, those columns] + bias: a chunk of kTileCols-wide column
// panels. Per depth block, the chunk's panels are packed, then each 6-row tile of the input (in L1 after its
// first panel) runs against every panel.
template <typename S>
void linear_panel_group(float* out, const float* inp, const S* weight, const float* bias, int C, int OC, int t0, int t1,
                        int p0, int p1) {
  static thread_local std::vector<float> packed((size_t)kMaxPanelsPerChunk * kDepthBlock *
                                                kTileCols);  // 384 KB, per thread
  const auto panel = [&](int p) { return packed.data() + (size_t)(p - p0) * kDepthBlock * kTileCols; };
  for (int k0 = 0; k0 < C; k0 += kDepthBlock) {
    const int kc = std::min(kDepthBlock, C - k0);
    for (int p = p0; p < p1; p++)
      pack_panel_transposed(panel(p), weight + (size_t)p * kTileCols * C + k0, C, kc,
                            std::min(kTileCols, OC - p * kTileCols));
    const TileOut op = k0 == 0 ? TileOut::kStoreBias : TileOut::kAdd;
    for (int t = t0; t < t1; t += kTileRows) {
      const int rows = std::min(kTileRows, t1 - t);
      const float* a = inp + (size_t)t * C + k0;
      for (int p = p0; p < p1; p++) {
        const int j0 = p * kTileCols, cols = std::min(kTileCols, OC - j0);
        float* c = out + (size_t)t * OC + j0;
        if (cols == kTileCols)
          tile_multiply_rows(rows, kc, {a, (size_t)C, 1}, panel(p), kTileCols, c, OC, op, bias + j0);
        else
          edge_tile(c, OC, a, C, panel(p), rows, kc, cols, op, bias + j0);
      }
    }
  }
}

// Chunks of (row block, group of panels): as many panels per chunk as still leaves kChunksPerThread chunks to
// every thread. The grouping changes no sum: each output is the same micro-kernel sums over the same depth blocks.
template <typename S>
void linear_many_rows(float* out, const float* inp, const S* weight, const float* bias, int T, int C, int OC) {
  const int panels = ceil_div(OC, kTileCols);
  const int row_blocks = ceil_div(T, kRowsPerChunk);
  const int rows_per_block = ceil_div(ceil_div(T, row_blocks), kTileRows) * kTileRows;
  int group = kMaxPanelsPerChunk;
  while (group > 1 && (long)ceil_div(panels, group) * row_blocks < (long)kChunksPerThread * cpu_threads()) group--;
  const int groups = ceil_div(panels, group);
  parallel_range((long)groups * row_blocks, 1, (long)T * C * OC, [=](long c0, long c1) {
    for (long c = c0; c < c1; c++) {
      const int g = (int)(c % groups), b = (int)(c / groups);
      const int t0 = b * rows_per_block, p0 = g * group;
      linear_panel_group(out, inp, weight, bias, C, OC, t0, std::min(T, t0 + rows_per_block), p0,
                         std::min(panels, p0 + group));
    }
  });
}

}  // namespace

// out: (rows, OC) = inp (rows, C) @ weight (OC, C)^T + bias (OC)
extern "C" void op_linear(float* out, float*, const float* inp, const void* weight, const float* bias, int rows, int C,
                          int OC, int wdtype) {
  OpTimer timer(OP_LINEAR);
  if (cpu_reject_unless(is_storage_type(wdtype))) return;
  with_storage(wdtype, [&](auto storage) {
    const auto* w = static_cast<const typename decltype(storage)::type*>(weight);
    if (rows <= kFewRows)
      linear_few_rows(out, inp, w, bias, rows, C, OC);
    else
      linear_many_rows(out, inp, w, bias, rows, C, OC);
  });
}

// ---- fused decode ops: the unfused twins in sequence (one row per sequence; the intermediate rows in a reused
// buffer), their storage types checked first so that a rejected call writes nothing
extern "C" void op_ln_qkv(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x,
                          const float* ln_weight, const float* ln_bias, const void* weight, const float* bias,
                          const int* state, int B, int C, int kv_C, int max_ctx, float eps, int wdtype, int kvdtype) {
  OpTimer timer(OP_LN_QKV);
  if (cpu_reject_unless(is_storage_type(wdtype) && is_storage_type(kvdtype))) return;
  static thread_local std::vector<float> normed;
  normed.resize((size_t)B * C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, B, C, eps);
  op_linear(qkv, partials, normed.data(), weight, bias, B, C, C + 2 * kv_C, wdtype);
  op_kv_append(k_cache, v_cache, qkv, state, B, 1, C, kv_C, max_ctx, kvdtype);
}

extern "C" void op_ln_linear_gelu(float* out, float* partials, const float* x, const float* ln_weight,
                                  const float* ln_bias, const void* weight, const float* bias, int B, int C, int OC,
                                  float eps, int wdtype) {
  OpTimer timer(OP_LN_LINEAR_GELU);
  if (cpu_reject_unless(is_storage_type(wdtype))) return;
  static thread_local std::vector<float> normed;
  normed.resize((size_t)B * C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, B, C, eps);
  op_linear(out, partials, normed.data(), weight, bias, B, C, OC, wdtype);
  op_gelu(out, out, B * OC);
}

extern "C" void op_linear_residual(float* x, float* partials, const float* inp, const void* weight, const float* bias,
                                   int B, int C, int OC, int wdtype) {
  OpTimer timer(OP_LINEAR_RESIDUAL);
  if (cpu_reject_unless(is_storage_type(wdtype))) return;
  static thread_local std::vector<float> product;
  product.resize((size_t)B * OC);
  op_linear(product.data(), partials, inp, weight, bias, B, C, OC, wdtype);
  op_residual(x, x, product.data(), B * OC);
}

extern "C" void op_rms_qkv_rope(float* qkv, void* k_cache, void* v_cache, float* partials, const float* x,
                                const float* ln_weight, const void* weight, const float* bias, const int* state,
                                const float* rope, const float* q_norm, const float* k_norm, int B, int C, int n_head,
                                int n_kv_head, int head_dim, int max_ctx, float eps, int wdtype, int kvdtype) {
  OpTimer timer(OP_RMS_QKV_ROPE);
  const bool shape_fits = n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && head_dim > 0 && head_dim % 2 == 0;
  if (cpu_reject_unless(shape_fits && (q_norm == nullptr) == (k_norm == nullptr) && is_storage_type(wdtype) &&
                        is_storage_type(kvdtype)))
    return;
  const int Q = n_head * head_dim, KV = n_kv_head * head_dim;
  static thread_local std::vector<float> normed;
  normed.resize((size_t)B * C);
  op_rmsnorm(normed.data(), x, ln_weight, B, C, eps);
  op_linear(qkv, partials, normed.data(), weight, bias, B, C, Q + 2 * KV, wdtype);
  op_rope(qkv, state, rope, q_norm, k_norm, B, 1, Q, n_head, n_kv_head, max_ctx, eps);
  op_kv_append(k_cache, v_cache, qkv, state, B, 1, Q, KV, max_ctx, kvdtype);
}

extern "C" void op_rms_gate_up(float* out, float* partials, const float* x, const float* ln_weight, const void* weight,
                               const float* bias, int B, int C, int I, float eps, int wdtype) {
  OpTimer timer(OP_RMS_GATE_UP);
  if (cpu_reject_unless(is_storage_type(wdtype))) return;
  static thread_local std::vector<float> normed, gate_up;
  normed.resize((size_t)B * C);
  gate_up.resize((size_t)B * 2 * I);
  op_rmsnorm(normed.data(), x, ln_weight, B, C, eps);
  op_linear(gate_up.data(), partials, normed.data(), weight, bias, B, C, 2 * I, wdtype);
  op_swiglu(out, gate_up.data(), B, I);
}
