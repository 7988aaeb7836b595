// What the CPU twins share below the op level: the widest float vector the compiler targets (g++
// -march=native), a polynomial e^x, and the register-blocked micro-kernel of the many-rows linear and the
// many-query attention. The library is correct on any x86-64 or other GCC target; only the tile's shape
// follows the vector registers the build machine has.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <math.h>

// Internal linkage throughout: each CPU twin gets its own copies, called directly (not through the PLT,
// as a shared library's template instantiations with default visibility would be).
namespace {

#if defined(__AVX512F__)
constexpr int kVecFloats = 16;  // 32 zmm registers: a 6 × 64 tile keeps 24 accumulators, 4 B vectors and a broadcast
constexpr int kTileRows = 6;
constexpr int kTileVecs = 4;
#elif defined(__AVX__)
constexpr int kVecFloats = 8;  // 16 ymm registers: a 6 × 16 tile keeps 12 accumulators
constexpr int kTileRows = 6;
constexpr int kTileVecs = 2;
#else
constexpr int kVecFloats = 4;  // 16 xmm registers (SSE, NEON): a 4 × 8 tile keeps 8 accumulators
constexpr int kTileRows = 4;
constexpr int kTileVecs = 2;
#endif
constexpr int kTileCols = kTileVecs * kVecFloats;  // columns of a micro-tile, and of a packed B panel

typedef float vecf __attribute__((vector_size(kVecFloats * sizeof(float))));

inline vecf load_vec(const float* p) {
  vecf v;
  memcpy(&v, p, sizeof v);  // an unaligned vector load
  return v;
}
inline void store_vec(float* p, vecf v) { memcpy(p, &v, sizeof v); }
inline vecf splat(float x) { return x - vecf{}; }  // x - 0 is x exactly (x + 0 is not, for -0): one broadcast

namespace cpu_math_detail {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 split so r = x - n ln2 stays exact
constexpr float kExpClamp = 88.0f;                                 // e^88 is near FLT_MAX
}  // namespace cpu_math_detail

// max and min as comparisons: one vmaxps / vminps in a vectorised loop (fmaxf's NaN rules make GCC call libm)
inline float max_of(float a, float b) { return a > b ? a : b; }
inline float min_of(float a, float b) { return a < b ? a : b; }

// e^x for |x| <= 88 (clamped outside) without a libm call (glibc's expf and tanhf do not vectorise):
// 2^n · p(r), r in [-ln2/2, ln2/2], p the degree-6 Taylor/Cephes polynomial; relative error ~1e-7.
inline float exp_approx(float x) {
  using namespace cpu_math_detail;
  x = min_of(max_of(x, -kExpClamp), kExpClamp);
  const float n = nearbyintf(x * kLog2e);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(float, ((int32_t)n + 127) << 23);
}

// ---- The micro-kernel ------------------------------------------------------------------------------------
//
// c (rows × kTileCols) = a (rows × k) @ b (k × kTileCols), then stored, stored plus a bias row, or added to c.
//   a: element (r, p) at a.data[r · a.row_stride + p · a.col_stride], read one float at a time and broadcast
//      (no packing: a matrix's rows with col_stride 1, or its columns with row_stride 1)
//   b: k rows of kTileCols contiguous floats, row stride ldb (a packed panel: ldb = kTileCols)
// Per step of k: kTileVecs vector loads of b, `rows` broadcasts of a, rows × kTileVecs FMAs into accumulators
// that stay in registers for the whole k loop.

struct StridedA {
  const float* data;
  size_t row_stride;
  size_t col_stride;
  StridedA rows_from(int r) const { return {data + r * row_stride, row_stride, col_stride}; }
};

enum class TileOut { kStore, kStoreBias, kAdd };

template <int Rows>
inline void tile_multiply(int k, StridedA a, const float* b, size_t ldb, float* c, size_t ldc, TileOut out, const float* bias) {
  vecf acc[Rows][kTileVecs] = {};
  const float* a_col = a.data;
  for (int p = 0; p < k; p++, a_col += a.col_stride) {
    vecf bv[kTileVecs];
#pragma GCC unroll 8
    for (int v = 0; v < kTileVecs; v++) bv[v] = load_vec(b + (size_t)p * ldb + v * kVecFloats);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; r++) {
      const vecf av = splat(a_col[r * a.row_stride]);
#pragma GCC unroll 8
      for (int v = 0; v < kTileVecs; v++) acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; r++)
#pragma GCC unroll 8
    for (int v = 0; v < kTileVecs; v++) {
      float* dst = c + r * ldc + v * kVecFloats;
      vecf value = acc[r][v];
      if (out == TileOut::kAdd) value += load_vec(dst);
      if (out == TileOut::kStoreBias) value += load_vec(bias + v * kVecFloats);
      store_vec(dst, value);
    }
}

// tile_multiply for any rows in 1..kTileRows (the last row block of a matrix).
template <int Rows = kTileRows>
inline void tile_multiply_rows(int rows, int k, StridedA a, const float* b, size_t ldb, float* c, size_t ldc, TileOut out,
                               const float* bias) {
  if constexpr (Rows > 1) {
    if (rows < Rows) return tile_multiply_rows<Rows - 1>(rows, k, a, b, ldb, c, ldc, out, bias);
  }
  tile_multiply<Rows>(k, a, b, ldb, c, ldc, out, bias);
}

// panel (k × kTileCols) = src[0:k, 0:cols] (row stride ld), columns past `cols` zero.
inline void pack_panel(float* panel, const float* src, size_t ld, int k, int cols) {
  for (int p = 0; p < k; p++) {
    float* dst = panel + (size_t)p * kTileCols;
    const float* row = src + (size_t)p * ld;
    if (cols == kTileCols) {
      memcpy(dst, row, sizeof(float) * kTileCols);
    } else {
      memcpy(dst, row, sizeof(float) * cols);
      memset(dst + cols, 0, sizeof(float) * (kTileCols - cols));
    }
  }
}

}  // namespace
