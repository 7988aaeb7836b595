// Deliberately broken launches, exported so test/kernels.emu.test.ts can check that the emulator reports
// misuse as a launch error instead of hanging (cuda_emu.h). Returns cudaGetLastError() after the launch.
#include "cuda_emu.h"

namespace {

enum SelfTest {
  kValidCollectives = 0,       // a correct kernel: barriers and shuffles everyone reaches
  kBlockTooLarge = 1,          // 1025 threads
  kBarrierAfterEarlyExit = 2,  // half the block returns, the rest waits at __syncthreads
  kMixedBarriers = 3,          // within a warp, half the lanes at a shuffle, half at __syncthreads
};
constexpr int kBlock = 64;

void collectives_kernel(int* out) {
  __shared__ int shared[kBlock];
  shared[threadIdx.x] = (int)threadIdx.x;
  __syncthreads();
  int v = shared[kBlock - 1 - threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

void early_exit_kernel(int*) {
  if (threadIdx.x >= kBlock / 2) return;
  __syncthreads();
}

void mixed_barriers_kernel(int*) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    (void)__shfl_xor_sync(0xffffffffu, 1, 1);
  }
}

}  // namespace

extern "C" int emu_selftest(int which) {
  static int out[kBlock];
  cudaGetLastError();
  switch (which) {
    case kValidCollectives:
      emu_launch(collectives_kernel, 2, kBlock, 0, nullptr, out);
      break;
    case kBlockTooLarge:
      emu_launch(collectives_kernel, 1, 1025, 0, nullptr, out);
      break;
    case kBarrierAfterEarlyExit:
      emu_launch(early_exit_kernel, 1, kBlock, 0, nullptr, out);
      break;
    case kMixedBarriers:
      emu_launch(mixed_barriers_kernel, 1, kBlock, 0, nullptr, out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
