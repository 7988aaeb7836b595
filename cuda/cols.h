// kWidth consecutive floats moved as 16-byte float4 accesses (kWidth a multiple of 4), or one float (kWidth 1).
// The kernels pick the vector width when a row's length is a multiple of it and its pointers are 16-byte aligned
// (row_vec4_count in cuda/launch.h), else 1.
//
// Loads go through L2 (__ldcg, coherent), never the non-coherent path (__ldg, or a const __restrict__
// pointer that nvcc turns into ld.global.nc): ptxas moves .nc loads across wait_for_predecessor, which would
// read a predecessor's output before it is written (cuda/launch.h), and streamed weights gain nothing from L1.
#pragma once

template <int kWidth> struct Cols {
  float v[kWidth];
};

// kWidth consecutive floats from p, each float4 (or the one float) fetched by fetch(pointer)
template <int kWidth, typename Fetch> __device__ __forceinline__ Cols<kWidth> fetch_cols(const float* p, Fetch fetch) {
  static_assert(kWidth == 1 || kWidth % 4 == 0, "a float, or whole float4s");
  Cols<kWidth> c;
  if constexpr (kWidth == 1) {
    c.v[0] = fetch(p);
  } else {
#pragma unroll
    for (int i = 0; i < kWidth; i += 4) {
      const float4 f = fetch(reinterpret_cast<const float4*>(p + i));
      c.v[i] = f.x, c.v[i + 1] = f.y, c.v[i + 2] = f.z, c.v[i + 3] = f.w;
    }
  }
  return c;
}

// kWidth consecutive floats of global memory, through L2
template <int kWidth> __device__ __forceinline__ Cols<kWidth> load_cols(const float* p) {
  return fetch_cols<kWidth>(p, [](const auto* at) { return __ldcg(at); });
}

// kWidth consecutive floats of shared memory (or any memory this thread may read plainly)
template <int kWidth> __device__ __forceinline__ Cols<kWidth> read_cols(const float* p) {
  return fetch_cols<kWidth>(p, [](const auto* at) { return *at; });
}

template <int kWidth> __device__ __forceinline__ void store_cols(float* p, const Cols<kWidth>& c) {
  if constexpr (kWidth == 1) {
    *p = c.v[0];
  } else {
#pragma unroll
    for (int i = 0; i < kWidth; i += 4)
      *reinterpret_cast<float4*>(p + i) = make_float4(c.v[i], c.v[i + 1], c.v[i + 2], c.v[i + 3]);
  }
}

template <int kWidth> __device__ __forceinline__ void add_cols(Cols<kWidth>& acc, const Cols<kWidth>& x) {
#pragma unroll
  for (int k = 0; k < kWidth; k++) acc.v[k] += x.v[k];
}
