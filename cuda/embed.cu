// op_embed: token + position embedding of this step's rows.
#include "launch.h"
#include "ops.h"

constexpr int kEmbedThreads = 256;

// out: (T, C) = wte[seq[pos + t]] + wpe[pos + t]     seq: (max_ctx + 1)  wte: (V, C)  wpe: (max_ctx, C)
// grid: (T)  block: (kEmbedThreads); the first n_vec4 float4 of each row go as 16-byte accesses, the rest as floats.
__global__ void __launch_bounds__(kEmbedThreads)
    embed_kernel(float* __restrict__ out, const int* __restrict__ seq, const int* __restrict__ state,
                 const float* __restrict__ wte, const float* __restrict__ wpe, int C, int n_vec4) {
  let_successor_start();
  wait_for_predecessor();
  const int position = __ldcg(state + STATE_POS) + blockIdx.x;
  const float* te = wte + (size_t)__ldcg(seq + position) * C;
  const float* pe = wpe + (size_t)position * C;
  float* o = out + (size_t)blockIdx.x * C;
  for (int i = threadIdx.x; i < n_vec4; i += blockDim.x) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(te) + i);
    const float4 b = __ldcg(reinterpret_cast<const float4*>(pe) + i);
    reinterpret_cast<float4*>(o)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
  for (int i = n_vec4 * kVecWidth + threadIdx.x; i < C; i += blockDim.x) o[i] = __ldcg(te + i) + __ldcg(pe + i);
}

extern "C" void op_embed(float* out, const int* seq, const int* state, const void* wte_any, const void* wpe_any, int B, int T, int C,
                         int, int wdtype) {
  if (rt_reject_unless(B == 1 && wdtype == DTYPE_F32)) return;
  const float* wte = static_cast<const float*>(wte_any);
  const float* wpe = static_cast<const float*>(wpe_any);
  const int n_vec4 = row_vec4_count(C, out, wte, wpe);
  LAUNCH(embed_kernel, T, kEmbedThreads, out, seq, state, wte, wpe, C, n_vec4);
}
