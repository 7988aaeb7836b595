// kWidth consecutive floats moved as one access: a 16-byte float4 when kWidth == 4, a float when 1.
// The kernels pick kWidth = 4 when a row's length is a multiple of 4 and its pointers are 16-byte aligned
// (row_vec4_count in cuda/launch.h), else 1.
//
// Loads go through L2 (__ldcg, coherent), never the non-coherent path (__ldg, or a const __restrict__
// pointer that nvcc turns into ld.global.nc): ptxas moves .nc loads across wait_for_predecessor, which would
// read a predecessor's output before it is written (cuda/launch.h), and streamed weights gain nothing from L1.
#pragma once

template <int kWidth> struct Cols {
  float v[kWidth];
};

template <int kWidth> __device__ __forceinline__ Cols<kWidth> load_cols(const float* p);
template <> __device__ __forceinline__ Cols<1> load_cols<1>(const float* p) { return {{__ldcg(p)}}; }
template <> __device__ __forceinline__ Cols<4> load_cols<4>(const float* p) {
  const float4 f = __ldcg(reinterpret_cast<const float4*>(p));
  return {{f.x, f.y, f.z, f.w}};
}

template <int kWidth> __device__ __forceinline__ void store_cols(float* p, const Cols<kWidth>& c);
template <> __device__ __forceinline__ void store_cols<1>(float* p, const Cols<1>& c) { *p = c.v[0]; }
template <> __device__ __forceinline__ void store_cols<4>(float* p, const Cols<4>& c) {
  *reinterpret_cast<float4*>(p) = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
}

template <int kWidth> __device__ __forceinline__ void add_cols(Cols<kWidth>& acc, const Cols<kWidth>& x) {
#pragma unroll
  for (int k = 0; k < kWidth; k++) acc.v[k] += x.v[k];
}
