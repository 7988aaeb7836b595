// Storage types of the weights and the KV cache (cuda/ops.h): DTYPE_F32, DTYPE_BF16, DTYPE_F16 as the element
// types float, __nv_bfloat16, __half. Kernels are templated on the element type W; a load keeps the bits packed
// in registers (a 16-byte access holds 4 floats or 8 halves) and each element is widened, exactly, where it is
// used; a store rounds fp32 values to nearest even (__float2bfloat16_rn, __float2half_rn), bit for bit as
// src/model/dtypes.ts and the CPU twins do for every number; a NaN stays a NaN, but these intrinsics write the
// canonical one (sign and payload dropped) where the twins keep them, so NaN bits are not compared (a NaN in a
// step is an error anyway: the generation stops at the first non-finite op). Like cols.h, every load goes
// through L2 (__ldcg).
#pragma once
#include <stdint.h>

#include <type_traits>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "ops.h"

constexpr int kAccessBytes = 16;  // one vector access
// Elements of W in one 16-byte access: 4 floats, 8 halves.
template <typename W> constexpr int kVecOf = kAccessBytes / (int)sizeof(W);

// Calls f(W{}) with W the element type of a known dtype (check is_storage_type first).
template <typename F> inline void with_storage(int dtype, F&& f) {
  if (dtype == DTYPE_BF16)
    f(__nv_bfloat16{});
  else if (dtype == DTYPE_F16)
    f(__half{});
  else
    f(float{});
}

// kWidth consecutive elements of W as loaded: 32-bit words holding them (a 16-byte access, or one element).
template <typename W, int kWidth> struct Packed {
  static_assert(kWidth == 1 || kWidth * (int)sizeof(W) == kAccessBytes, "one element or one 16-byte access");
  uint32_t word[kWidth == 1 ? 1 : kAccessBytes / 4];
};

template <typename W, int kWidth> __device__ __forceinline__ Packed<W, kWidth> load_packed(const W* p) {
  if constexpr (kWidth > 1) {
    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
    return {{u.x, u.y, u.z, u.w}};
  } else if constexpr (sizeof(W) == 4) {
    return {{__float_as_uint(__ldcg(reinterpret_cast<const float*>(p)))}};
  } else {
    return {{(uint32_t)__ldcg(reinterpret_cast<const unsigned short*>(p))}};
  }
}

// Element k of a packed access, widened to fp32 exactly (k a compile-time constant after unrolling).
template <typename W, int kWidth> __device__ __forceinline__ float widen(const Packed<W, kWidth>& p, int k) {
  if constexpr (sizeof(W) == 4) {
    return __uint_as_float(p.word[k]);
  } else {
    const uint32_t word = p.word[k / 2];
    const bool high = k % 2 == 1;
    if constexpr (std::is_same_v<W, __nv_bfloat16>) {
      return __uint_as_float(high ? word & 0xffff0000u : word << 16);
    } else {
      return __half2float(__ushort_as_half((unsigned short)(high ? word >> 16 : word & 0xffffu)));
    }
  }
}

// The bits of x rounded to nearest even in a 16-bit type K.
template <typename K> __device__ __forceinline__ uint32_t rounded_bits(float x) {
  if constexpr (std::is_same_v<K, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else
    return __half_as_ushort(__float2half_rn(x));
}

// p[0, n) = v rounded to K, as one access (n = 8 or 4: 16 or 8 bytes of halves; n floats as float4s) or one element.
template <typename K, int n> __device__ __forceinline__ void store_rounded(K* p, const float (&v)[n]) {
  static_assert(n == 1 || n % 4 == 0, "one element, or whole float4s / 8-byte halves");
  if constexpr (std::is_same_v<K, float>) {
    if constexpr (n == 1) {
      *p = v[0];
    } else {
#pragma unroll
      for (int i = 0; i < n; i += 4)
        *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    }
  } else if constexpr (n == 1) {
    *reinterpret_cast<unsigned short*>(p) = (unsigned short)rounded_bits<K>(v[0]);
  } else {
    uint32_t w[n / 2];
#pragma unroll
    for (int i = 0; i < n / 2; i++) w[i] = rounded_bits<K>(v[2 * i]) | rounded_bits<K>(v[2 * i + 1]) << 16;
    if constexpr (n == 8)
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    else
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  }
}

// The same into element `at` of a buffer stored in `dtype` (a DTYPE_* code, checked by the launcher).
template <int n>
__device__ __forceinline__ void store_rounded_as(int dtype, void* base, size_t at, const float (&v)[n]) {
  if (dtype == DTYPE_BF16)
    store_rounded<__nv_bfloat16, n>(static_cast<__nv_bfloat16*>(base) + at, v);
  else if (dtype == DTYPE_F16)
    store_rounded<__half, n>(static_cast<__half*>(base) + at, v);
  else
    store_rounded<float, n>(static_cast<float*>(base) + at, v);
}
