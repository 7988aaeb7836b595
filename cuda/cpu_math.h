// What the CPU twins share below the op level: the widest float vector the compiler targets (g++
// -march=native), the storage types (bf16, f16) and their conversions, a polynomial e^x, and the
// register-blocked micro-kernel of the many-rows linear and the many-query attention. The library is correct
// on any x86-64 or other GCC target; only the tile's shape and the conversion instructions follow what the
// build machine has.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <math.h>

#include <type_traits>
#include <utility>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "ops.h"

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
template <int N> struct Floats {
  typedef float type __attribute__((vector_size(N * sizeof(float))));
};
template <int N, size_t... I> inline float sum_halves(typename Floats<N>::type v, std::index_sequence<I...>) {
  if constexpr (N == 1) {
    return v[0];
  } else {  // one vextract (or shuffle) and one add per level
    const typename Floats<N / 2>::type low = __builtin_shufflevector(v, v, I...),
                                       high = __builtin_shufflevector(v, v, (I + N / 2)...);
    return sum_halves<N / 2>(low + high, std::make_index_sequence<N / 4 ? N / 4 : 1>{});
  }
}
}  // namespace cpu_math_detail

// The lanes' sum as a tree (the high half added to the low half, until one lane is left): the same sum
// wherever it is taken, in log2(kVecFloats) dependent adds.
inline float sum_lanes(vecf v) {
  return cpu_math_detail::sum_halves<kVecFloats>(v, std::make_index_sequence<kVecFloats / 2>{});
}

namespace cpu_math_detail {
// [a | b]'s adjacent lanes added pairwise: a's kVecFloats / 2 pair sums, then b's
template <size_t... I> inline vecf pair_sums(vecf a, vecf b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (2 * I)...) + __builtin_shufflevector(a, b, (2 * I + 1)...);
}
// 8-lane vectors (AVX) sum pairs within 4-lane blocks, whose shuffles are cheap, and cross blocks once, last
constexpr bool kBlockPairSums = kVecFloats == 8;
// The same pair sums within each 4-lane block: block c holds a's two pair sums of that block, then b's (as vhaddps:
// two vshufps and an add, where pair_sums takes four vpermd and two blends on AVX2)
constexpr size_t block_pair_lane(size_t i) {
  return i / 4 * 4 + (i % 4 < 2 ? 2 * (i % 4) : kVecFloats + 2 * (i % 4 - 2));
}
template <size_t... I> inline vecf block_pair_sums(vecf a, vecf b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, block_pair_lane(I)...) +
         __builtin_shufflevector(a, b, (block_pair_lane(I) + 1)...);
}
// [a's lower half | b's lower half] and [a's upper half | b's upper half]: their sum's lane j < kVecFloats / 2 is
// a[j] + a[j + kVecFloats / 2], lane kVecFloats / 2 + j the same of b
template <size_t... I> inline vecf lower_halves(vecf a, vecf b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (I < kVecFloats / 2 ? I : I + kVecFloats / 2)...);
}
template <size_t... I> inline vecf upper_halves(vecf a, vecf b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (I < kVecFloats / 2 ? I + kVecFloats / 2 : I + kVecFloats)...);
}
}  // namespace cpu_math_detail

// The lanes' sums of kVecFloats vectors, in two halves (so that fewer vectors are live at once): partial =
// sum_lanes_half(the first kVecFloats / 2 vectors), then sum_lanes_halves(partial, sum_lanes_half(the others))'s lane
// j is the lanes' sum of vector j. Adjacent lanes are added pairwise, level by level (kVecFloats - 1 pair sums, where
// sum_lanes would take kVecFloats trees): the same sum for every vector, whichever its lane. With 8 lanes (AVX)
// the first two levels stay within 4-lane blocks and the last adds the halves' blocks: the same sums, from cheaper
// shuffles.
inline vecf sum_lanes_half(vecf (&v)[kVecFloats / 2]) {
  constexpr auto lanes = std::make_index_sequence<kVecFloats>{};
#pragma GCC unroll 4
  for (int width = kVecFloats / 2; width > 1; width /= 2)
#pragma GCC unroll 8
    for (int i = 0; i < width / 2; i++)
      v[i] = cpu_math_detail::kBlockPairSums ? cpu_math_detail::block_pair_sums(v[2 * i], v[2 * i + 1], lanes)
                                             : cpu_math_detail::pair_sums(v[2 * i], v[2 * i + 1], lanes);
  return v[0];  // each vector's sum in two halves: adjacent lanes, or (8 lanes) the same lane of the two blocks
}
inline vecf sum_lanes_halves(vecf first, vecf second) {
  constexpr auto lanes = std::make_index_sequence<kVecFloats>{};
  if constexpr (cpu_math_detail::kBlockPairSums)
    return cpu_math_detail::lower_halves(first, second, lanes) + cpu_math_detail::upper_halves(first, second, lanes);
  return cpu_math_detail::pair_sums(first, second, lanes);
}
// Lane j of the result: the lanes' sum of v[j] (v is overwritten), as sum_lanes_half and sum_lanes_halves
inline vecf sum_lanes_each(vecf (&v)[kVecFloats]) {
  vecf(&first)[kVecFloats / 2] = *reinterpret_cast<vecf(*)[kVecFloats / 2]>(v);
  vecf(&second)[kVecFloats / 2] = *reinterpret_cast<vecf(*)[kVecFloats / 2]>(v + kVecFloats / 2);
  const vecf partial = sum_lanes_half(first);
  return sum_lanes_halves(partial, sum_lanes_half(second));
}

// ---- Storage types (cuda/ops.h) ---------------------------------------------------------------------------
//
// Weights and the KV cache may be stored as bf16 or f16: a load widens exactly to fp32 (every bf16 and f16
// value is an fp32 value), a store rounds the fp32 result to nearest, ties to even, as src/model/dtypes.ts
// does. Every op is a template over its storage type S (float, Bf16 or F16), instantiated by with_storage.

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

typedef uint16_t vec_u16 __attribute__((vector_size(kVecFloats * sizeof(uint16_t))));
typedef uint32_t vec_u32 __attribute__((vector_size(kVecFloats * sizeof(uint32_t))));

template <typename S> struct StorageTag {
  using type = S;
};

// fn(StorageTag<S>{}) for the storage type of a DTYPE_* code (check it with is_storage_type first).
template <typename Fn> void with_storage(int dtype, const Fn& fn) {
  if (dtype == DTYPE_BF16) return fn(StorageTag<Bf16>{});
  if (dtype == DTYPE_F16) return fn(StorageTag<F16>{});
  return fn(StorageTag<float>{});
}

namespace cpu_math_detail {
constexpr uint32_t kF16ExponentMask = 0x7c00u << 13;  // an f16's exponent field, shifted to fp32's place
constexpr uint32_t kF16Rebias = (127 - 15) << 23;     // fp32 exponent bias minus f16's
constexpr uint32_t kF16MinNormal = 113u << 23;        // 2^-14 as fp32 bits: the smallest normal f16

// f16 bits (in 32-bit lanes) to fp32 bits, exactly, on integer lanes: normals rebiased, Inf/NaN to fp32's
// all-ones exponent (a NaN quietened, as vcvtph2ps does), subnormals renormalised by an exact subtraction.
template <typename U, typename F> inline U f16_to_f32_bits(U h) {
  const U magnitude = (h & 0x7fffu) << 13, exponent = magnitude & kF16ExponentMask;
  const U normal = magnitude + kF16Rebias;
  const U special = (normal + kF16Rebias) | (magnitude != kF16ExponentMask ? U{} + 0x00400000u : U{});  // NaN quiet bit
  const U subnormal = __builtin_bit_cast(
      U, __builtin_bit_cast(F, magnitude + kF16MinNormal) - __builtin_bit_cast(F, U{} + kF16MinNormal));
  const U sign = (h & 0x8000u) << 16;
  return sign | (exponent == kF16ExponentMask ? special : exponent == 0 ? subnormal : normal);
}
}  // namespace cpu_math_detail

inline float widen(float x) { return x; }
inline float widen(Bf16 x) { return __builtin_bit_cast(float, (uint32_t)x.bits << 16); }
inline float widen(F16 x) {
#if defined(__F16C__)
  return _cvtsh_ss(x.bits);
#else
  return __builtin_bit_cast(float, cpu_math_detail::f16_to_f32_bits<uint32_t, float>(x.bits));
#endif
}

// kVecFloats stored values from p (unaligned), widened.
inline vecf load_widened(const float* p) { return load_vec(p); }
inline vecf load_widened(const Bf16* p) {  // vpmovzxwd, vpslld (GCC splits the generic conversion at 512 bits)
  vec_u16 bits;
  memcpy(&bits, p, sizeof bits);
#if defined(__AVX512F__)
  constexpr __mmask16 kAll = 0xffff;  // zero-masking forms that keep every lane (see F16 below)
  return __builtin_bit_cast(
      vecf, _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, __builtin_bit_cast(__m256i, bits)), 16));
#else
  return __builtin_bit_cast(vecf, __builtin_convertvector(bits, vec_u32) << 16);
#endif
}
inline vecf load_widened(const F16* p) {
  vec_u16 bits;
  memcpy(&bits, p, sizeof bits);
#if defined(__F16C__) && defined(__AVX512F__)
  // vcvtph2ps zmm (the zero-masking form with every lane kept: GCC 12 warns of _mm512_cvtph_ps's undefined operand)
  return __builtin_bit_cast(vecf, _mm512_maskz_cvtph_ps((__mmask16)0xffff, __builtin_bit_cast(__m256i, bits)));
#elif defined(__F16C__) && defined(__AVX__)
  return __builtin_bit_cast(vecf, _mm256_cvtph_ps(__builtin_bit_cast(__m128i, bits)));  // vcvtph2ps ymm
#else
  return __builtin_bit_cast(vecf,
                            cpu_math_detail::f16_to_f32_bits<vec_u32, vecf>(__builtin_convertvector(bits, vec_u32)));
#endif
}

// dst[0:n] = src[0:n] widened
template <typename S> inline void widen_into(float* dst, const S* src, int n) {
  int i = 0;
  for (; i + kVecFloats <= n; i += kVecFloats) store_vec(dst + i, load_widened(src + i));
  for (; i < n; i++) dst[i] = widen(src[i]);
}

// ---- Dot products of a stored row ------------------------------------------------------------------------
//
// out[r · out_stride] = x[r] (C) · row (C) for r < Rows: kDotChains vector chains, the columns past the last whole
// step in chain 0 (the last partial vector zero-padded), then the chains' lanes as a tree. Every (r, row) pair is
// summed in the same order whatever Rows is, so a row of a batch gets the bits it gets alone. Only vector
// arithmetic, so that the compiler has no scalar loop to vectorise (or not) differently for different Rows.
constexpr int kDotChains = 2;   // independent vector accumulators per dot product
constexpr int kRowsPerDot = 4;  // inputs scored per pass over a stored row (2 × 4 accumulators)

template <int Rows, typename S>
__attribute__((always_inline)) inline void dot_row(float* out, size_t out_stride, const float* const* x, const S* row,
                                                   int C) {
  constexpr int kStep = kDotChains * kVecFloats;
  vecf acc[Rows][kDotChains] = {};
  int c = 0;
  for (; c + kStep <= C; c += kStep)
#pragma GCC unroll 4
    for (int k = 0; k < kDotChains; k++) {
      const vecf w = load_widened(row + c + k * kVecFloats);
#pragma GCC unroll 8
      for (int r = 0; r < Rows; r++) acc[r][k] += load_vec(x[r] + c + k * kVecFloats) * w;
    }
  for (; c + kVecFloats <= C; c += kVecFloats) {
    const vecf w = load_widened(row + c);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; r++) acc[r][0] += load_vec(x[r] + c) * w;
  }
  if (c < C) {
    vecf w = {};
    for (int i = c; i < C; i++) w[i - c] = widen(row[i]);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; r++) {
      vecf xv = {};
      for (int i = c; i < C; i++) xv[i - c] = x[r][i];
      acc[r][0] += xv * w;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; r++) {
    vecf lanes = acc[r][0];
#pragma GCC unroll 4
    for (int k = 1; k < kDotChains; k++) lanes += acc[r][k];
    out[r * out_stride] = sum_lanes(lanes);
  }
}

// dot_row for any rows in 1..kRowsPerDot
template <int Rows = kRowsPerDot, typename S>
inline void dot_row_for(int rows, float* out, size_t out_stride, const float* const* x, const S* row, int C) {
  if constexpr (Rows > 1) {
    if (rows < Rows) return dot_row_for<Rows - 1>(rows, out, out_stride, x, row, C);
  }
  dot_row<Rows>(out, out_stride, x, row, C);
}

// out[b · out_stride] = x[b] · row for every b < B, kRowsPerDot inputs per pass (the row stays in L1 for the next).
template <typename S>
inline void dot_row_each(float* out, size_t out_stride, const float* const* x, int B, const S* row, int C) {
  for (int b = 0; b < B; b += kRowsPerDot)
    dot_row_for(B - b < kRowsPerDot ? B - b : kRowsPerDot, out + b * out_stride, out_stride, x + b, row, C);
}

// x rounded to the storage type: nearest, ties to even. bf16: the top half of the bits, rounded; NaN stays
// a (quiet) NaN. f16: magnitudes from 65520 up (and Inf) become ±Inf as IEEE 754 rounds them, those below
// 2^-14 become subnormals or ±0, NaN a quiet NaN keeping the top of its payload.
inline float narrow(float x, float*) { return x; }
inline Bf16 narrow(float x, Bf16*) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((bits >> 16) | 0x0040u)};
  return {(uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}
inline F16 narrow(float x, F16*) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, x), magnitude = bits & 0x7fffffffu;
  const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  constexpr uint32_t kInfinity = 0x7f800000u, kOverflow = 0x477ff000u /* 65520 */;
  constexpr uint32_t kHalfMinSubnormal = 0x33000000u;  // 2^-25: at or below it, the nearest even f16 is 0
  if (magnitude > kInfinity) return {(uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  if (magnitude >= kOverflow) return {(uint16_t)(sign | 0x7c00u)};
  if (magnitude >= cpu_math_detail::kF16MinNormal) {
    const uint32_t rebiased = magnitude - cpu_math_detail::kF16Rebias;
    return {(uint16_t)(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13))};
  }
  if (magnitude <= kHalfMinSubnormal) return {sign};
  // a subnormal f16 (or the smallest normal, when it rounds up): the significand in units of 2^-24
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u, shift = 126 - (magnitude >> 23);
  const uint32_t half = 1u << (shift - 1), odd = (significand >> shift) & 1u;
  return {(uint16_t)(sign | ((significand + half - 1 + odd) >> shift))};
}
template <typename S> inline S narrow_to(float x) { return narrow(x, (S*)nullptr); }

namespace cpu_math_detail {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 split so r = x - n ln2 stays exact
constexpr float kExpClamp = 88.0f;                                // e^88 is near FLT_MAX
// (t + 1.5 · 2^23) - 1.5 · 2^23 is t rounded to an integer, ties to even, for |t| < 2^22 (t = x · log2 e may be
// the exact product where the compiler fuses it into the add: n then differs only near a half, where r stays small)
constexpr float kRoundToInteger = 12582912.0f;
#if defined(__FAST_MATH__) || defined(__ASSOCIATIVE_MATH__)
#error "exp_approx rounds with (t + c) - c, which -ffast-math / -fassociative-math fold to t"
#endif
typedef int32_t vec_i32 __attribute__((vector_size(kVecFloats * sizeof(int32_t))));
template <typename V> inline V broadcast(float x) {
  if constexpr (std::is_same_v<V, float>)
    return x;
  else
    return splat(x);
}
inline int32_t to_int(float x) { return (int32_t)x; }
inline vec_i32 to_int(vecf x) { return __builtin_convertvector(x, vec_i32); }
}  // namespace cpu_math_detail

// max and min as comparisons, NaN rules and all (a vmaxps / vminps for floats, a compare and a blend for vecfs;
// fmaxf's NaN rules make GCC call libm)
inline float max_of(float a, float b) { return a > b ? a : b; }
inline float min_of(float a, float b) { return a < b ? a : b; }
inline vecf max_of(vecf a, vecf b) { return a > b ? a : b; }
inline vecf min_of(vecf a, vecf b) { return a < b ? a : b; }

// e^x for |x| <= 88 (clamped outside) without a libm call (glibc's expf and tanhf do not vectorise), of a float or of
// each lane of a vecf, the same operations in the same order, so that a lane's result is the float's:
// 2^n · p(r), r in [-ln2/2, ln2/2], p the degree-6 Taylor/Cephes polynomial; relative error ~1e-7.
// Loops call the vecf form: GCC 12 leaves a loop over the float form scalar where the target has no mask
// registers (AVX2: "control flow in loop", ~20 cycles an element; AMD EPYC Zen 3 VM, 2026-12-07).
template <typename V> inline V exp_approx(V x) {
  using namespace cpu_math_detail;
  const auto c = [](float value) { return broadcast<V>(value); };
  x = min_of(max_of(x, c(-kExpClamp)), c(kExpClamp));
  const V n = (x * kLog2e + kRoundToInteger) - kRoundToInteger;
  const V r = (x - n * kLn2Hi) - n * kLn2Lo;
  V p = c(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(V, (to_int(n) + 127) << 23);
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
inline void tile_multiply(int k, StridedA a, const float* b, size_t ldb, float* c, size_t ldc, TileOut out,
                          const float* bias) {
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
inline void tile_multiply_rows(int rows, int k, StridedA a, const float* b, size_t ldb, float* c, size_t ldc,
                               TileOut out, const float* bias) {
  if constexpr (Rows > 1) {
    if (rows < Rows) return tile_multiply_rows<Rows - 1>(rows, k, a, b, ldb, c, ldc, out, bias);
  }
  tile_multiply<Rows>(k, a, b, ldb, c, ldc, out, bias);
}

// panel (k × kTileCols) = src[0:cols, 0:k]^T (src's row stride ld: an out-major matrix's rows) widened to fp32,
// columns past `cols` zero. Each source row is widened a vector at a time into a column of the panel.
template <typename S> inline void pack_panel_transposed(float* panel, const S* src, size_t ld, int k, int cols) {
  if (cols < kTileCols)
    for (int p = 0; p < k; p++) memset(panel + (size_t)p * kTileCols + cols, 0, sizeof(float) * (kTileCols - cols));
  for (int j = 0; j < cols; j++) {
    const S* row = src + (size_t)j * ld;
    int p = 0;
    for (; p + kVecFloats <= k; p += kVecFloats) {
      const vecf v = load_widened(row + p);
#pragma GCC unroll 16
      for (int i = 0; i < kVecFloats; i++) panel[(size_t)(p + i) * kTileCols + j] = v[i];
    }
    for (; p < k; p++) panel[(size_t)p * kTileCols + j] = widen(row[p]);
  }
}

}  // namespace
