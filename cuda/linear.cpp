// CPU twin of linear.cu: out (T, OC) = inp (T, C) @ weight (C, OC) + bias (OC), weight in Conv1D layout,
// stored as fp32, bf16 or f16 (widened as it is read; every sum in fp32).
//
// Few rows (decode, T <= kFewRows): memory-bound. The weight rows are cut into bands; each band is streamed
// once, contiguously, into its own partial output (every weight vector widened once and used by all T rows),
// and the partials are summed in band order afterwards, so the result does not depend on which thread ran
// which band. The bands depend on C and OC only, so a row gets the same bits whatever T is (cuda/ops.h).
// Many rows (prefill, the uncached step): compute-bound. A GEMM in the manner of BLIS: each chunk owns a few
// kTileCols-wide column panels of the output and a block of rows; it packs the weight's panels kDepthBlock
// rows at a time (widening them to fp32) and runs the register-blocked micro-kernel (cpu_math.h) down its
// rows, every packed panel reused by every row tile.
#include <string.h>

#include <algorithm>
#include <vector>

#include "cpu_math.h"
#include "cpu_runtime.h"
#include "ops.h"

namespace {

constexpr int kFewRows = MAX_BATCH;        // up to this many rows, the few-rows path: a row's sums as alone (ops.h)
constexpr int kRowsPerPass = 8;            // weight rows folded into a partial per pass (few-rows path)
constexpr size_t kShortRowBytes = 2048;    // weight rows up to this long are prefetched a pass ahead (few-rows path)
constexpr long kPartialFloats = 1L << 16;  // one row's partials across the bands (256 KB) stay in L2
constexpr int kMaxBands = 16;              // ~0.5 MB of fp32 weights per band for GPT-2 small's matvecs
constexpr int kMinBands = 4;               // enough to share between threads when OC is large
constexpr int kDepthBlock = 384;           // weight rows per packed panel: 96 KB at 64 columns (AVX-512), in L2
constexpr int kMaxPanelsPerChunk = 4;      // a 6-row input tile feeds up to this many packed panels from L1
constexpr int kRowsPerChunk = 512;         // T beyond this is cut into row blocks (each packs its panels again)
constexpr int kChunksPerThread = 3;        // fewer panels per chunk until every thread has this many chunks

int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// One output element's share of a pass: x[0:8] · (w0..w7 at one column), in the same order for every row and
// width (a vector of columns or one column).
template <typename V> inline V fold8(const float* x, const V (&w)[kRowsPerPass]) {
  return (x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3]) +
         (x[4] * w[4] + x[5] * w[5] + x[6] * w[6] + x[7] * w[7]);
}

// partial: (T, OC) = inp[:, c0:c1] @ weight[c0:c1, :]
// Eight weight rows per pass: each vector of them is loaded and widened once, then folded into every row's
// partial (one load and one store of the partial per eight FMAs). A pass reads its eight rows side by side;
// where they are short (bf16 and f16 rows of 768 columns: 1.5 KB, several to a 4 KB page) the hardware
// prefetcher falls behind, so the next pass's rows are prefetched as this one reads (measured: the 768-column
// bf16 matvecs 15–23% faster, the longer rows of fp32 or wider matrices slower with it, so they go without).
template <typename S>
void accumulate_band(float* partial, const float* inp, const S* weight, int T, int C, int OC, int c0, int c1) {
  memset(partial, 0, sizeof(float) * (size_t)T * OC);
  const int vector_cols = OC - OC % kVecFloats;
  const bool prefetch = OC * sizeof(S) <= kShortRowBytes;
  constexpr int kPassBytesPerVector = kRowsPerPass * kVecFloats * (int)sizeof(S);  // of a pass, per column vector
  int c = c0;
  for (; c + kRowsPerPass <= c1; c += kRowsPerPass) {
    const S* w = weight + (size_t)c * OC;
    const char* next_pass = reinterpret_cast<const char*>(w + (size_t)kRowsPerPass * OC);
    for (int o = 0; o < vector_cols; o += kVecFloats) {
      if (prefetch)
#pragma GCC unroll 8
        for (int b = 0; b < kPassBytesPerVector; b += 64)
          __builtin_prefetch(next_pass + (size_t)o * kRowsPerPass * sizeof(S) + b);
      vecf wv[kRowsPerPass];
#pragma GCC unroll 8
      for (int k = 0; k < kRowsPerPass; k++) wv[k] = load_widened(w + (size_t)k * OC + o);
      for (int t = 0; t < T; t++) {
        const float* x = inp + (size_t)t * C + c;
        float* p = partial + (size_t)t * OC + o;
        store_vec(p, load_vec(p) + fold8(x, wv));
      }
    }
    for (int o = vector_cols; o < OC; o++) {
      float wv[kRowsPerPass];
      for (int k = 0; k < kRowsPerPass; k++) wv[k] = widen(w[(size_t)k * OC + o]);
      for (int t = 0; t < T; t++) partial[(size_t)t * OC + o] += fold8(inp + (size_t)t * C + c, wv);
    }
  }
  for (; c < c1; c++) {
    const S* w_row = weight + (size_t)c * OC;
    for (int t = 0; t < T; t++) {
      const float x = inp[(size_t)t * C + c];
      float* p = partial + (size_t)t * OC;
      int o = 0;
      for (; o < vector_cols; o += kVecFloats) store_vec(p + o, load_vec(p + o) + splat(x) * load_widened(w_row + o));
      for (; o < OC; o++) p[o] += x * widen(w_row[o]);
    }
  }
}

// Bands: as many as one row's partials budget allows (kMinBands..kMaxBands), one for a small matrix; each a
// whole number of passes of kRowsPerPass rows. Not T: a row is summed the same way in any batch.
int band_rows(int C, int OC) {
  int bands = 1;
  if ((long)C * OC >= kParallelMinWork) bands = (int)std::clamp(kPartialFloats / OC, (long)kMinBands, (long)kMaxBands);
  return ceil_div(ceil_div(C, bands), kRowsPerPass) * kRowsPerPass;
}

template <typename S>
void linear_few_rows(float* out, const float* inp, const S* weight, const float* bias, int T, int C, int OC) {
  const int rows = band_rows(C, OC);
  const int bands = ceil_div(C, rows);
  const size_t partial_floats = (size_t)T * OC;
  static thread_local std::vector<float> partials;  // (bands, T, OC), reused across calls
  partials.resize(partial_floats * bands);
  float* all = partials.data();
  parallel_chunks(bands, [&](int band) {
    accumulate_band(all + partial_floats * band, inp, weight, T, C, OC, band * rows, std::min(C, (band + 1) * rows));
  });
  for (int t = 0; t < T; t++) {
    float* y = out + (size_t)t * OC;
    memcpy(y, bias, sizeof(float) * OC);
    for (int band = 0; band < bands; band++) {
      const float* p = all + partial_floats * band + (size_t)t * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++) y[o] += p[o];
    }
  }
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
      pack_panel(panel(p), weight + (size_t)k0 * OC + p * kTileCols, OC, kc, std::min(kTileCols, OC - p * kTileCols));
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

// out: (rows, OC) = inp (rows, C) @ weight (C, OC) + bias (OC)
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
                          const int* state, int B, int C, int max_ctx, float eps, int wdtype, int kvdtype) {
  OpTimer timer(OP_LN_QKV);
  if (cpu_reject_unless(is_storage_type(wdtype) && is_storage_type(kvdtype))) return;
  static thread_local std::vector<float> normed;
  normed.resize((size_t)B * C);
  op_layernorm(normed.data(), x, ln_weight, ln_bias, B, C, eps);
  op_linear(qkv, partials, normed.data(), weight, bias, B, C, 3 * C, wdtype);
  op_kv_append(k_cache, v_cache, qkv, state, B, 1, C, C, max_ctx, kvdtype);
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
