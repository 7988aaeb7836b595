// Deliberately broken launches, exported so test/kernels.emu.test.ts can check that the emulator reports
// misuse as a launch error instead of hanging (cuda_emu.h), grid barriers in cooperative launches, which
// must compute the right sums, and shared memory that is each block's own. Returns cudaGetLastError() after
// the launch, or kWrongResult.
#include "cuda_emu.h"

#include <limits.h>

namespace {

enum SelfTest {
  kValidCollectives = 0,           // a correct kernel: barriers and shuffles everyone reaches
  kBlockTooLarge = 1,              // 1025 threads
  kBarrierAfterEarlyExit = 2,      // half the block returns, the rest waits at __syncthreads
  kMixedBarriers = 3,              // within a warp, half the lanes at a shuffle, half at __syncthreads
  kGridBarrier = 4,                // cooperative: every block meets the others at grid barriers, phase after phase
  kGridBarrierNotCooperative = 5,  // the same kernel launched normally: block 0's wait can never end
  kGridBarrierBlockAbsent = 6,     // cooperative, but one block never arrives: the others wait forever
  kCooperativeTooLarge = 7,        // one block (of 256 threads) more than cooperative_max_blocks allows
  kGridBarrierInGraph = 8,         // cooperative launch captured on a stream, then replayed as a graph
  kSharedPerBlock = 9,  // cooperative: each block's shared memory, static and dynamic, holds its own across a wait
  kSharedStartsPoisoned =
      10,  // blocks one after another: the first finds poison in shared memory, the next its leftovers
  kStaticSharedTooLarge = 11,  // one byte over the 48 KiB of static shared memory a block may have
};
constexpr int kWrongResult = -1;  // the launch ran, but the kernel computed wrong values
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

// ---- grid barriers ----------------------------------------------------------------------------------------
constexpr int kCoopThreads = 256;
constexpr int kCoopBlocks = 4;  // what cooperative_max_blocks(kCoopThreads) must allow: 1024 threads in all
constexpr int kPhases = 3;
constexpr int kNoAbsentBlock = -1;

struct GridBarrierData {
  unsigned arrivals;                                    // the barrier's counter: phase p ends at p x gridDim.x
  int slots[2][(kCoopBlocks + 1) * kCoopThreads];       // slots[phase % 2]: (blocks, threads), double-buffered
  int sums[kPhases][(kCoopBlocks + 1) * kCoopThreads];  // sums[phase - 1]: (blocks, threads)
  int arrival_order[kPhases * (kCoopBlocks + 1)];       // the block that arrived n-th
};
GridBarrierData g_grid;

int slot_value(int phase, int block, int thread) { return phase * 7919 + block * 131 + thread; }

// Each phase: every thread writes its slot, the block arrives, and after the grid barrier every thread sums
// its column of every block's slots. The slots alternate between two buffers, so a block already writing the
// next phase's cannot overwrite the ones a slower block is still reading.
void grid_barrier_kernel(GridBarrierData* data, int absent_block) {
  const int column = (int)threadIdx.x;
  for (int phase = 1; phase <= kPhases; phase++) {
    int* slots = data->slots[phase % 2];
    slots[blockIdx.x * blockDim.x + column] = slot_value(phase, (int)blockIdx.x, column);
    if ((int)blockIdx.x == absent_block) return;
    __syncthreads();
    if (threadIdx.x == 0) {
      data->arrival_order[atomicAdd(&data->arrivals, 1u)] = (int)blockIdx.x;
      emu::wait_until_at_least(&data->arrivals, phase * gridDim.x);
    }
    __syncthreads();
    int sum = 0;
    for (int b = 0; b < (int)gridDim.x; b++) sum += slots[b * blockDim.x + column];
    data->sums[phase - 1][blockIdx.x * blockDim.x + column] = sum;
  }
}

void reset_grid_data() {
  g_grid.arrivals = 0;
  for (auto& phase : g_grid.sums)
    for (int& s : phase) s = INT_MIN;  // poison: a sum never written fails
}

// Every block's sums of every phase are right.
bool grid_sums_right(int blocks) {
  for (int phase = 1; phase <= kPhases; phase++)
    for (int block = 0; block < blocks; block++)
      for (int t = 0; t < kCoopThreads; t++) {
        int expected = 0;
        for (int b = 0; b < blocks; b++) expected += slot_value(phase, b, t);
        if (g_grid.sums[phase - 1][block * kCoopThreads + t] != expected) return false;
      }
  return true;
}

// The launch's error, else whether it computed the right sums.
int grid_barrier_result(int blocks) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  return grid_sums_right(blocks) ? cudaSuccess : kWrongResult;
}

int launch_grid_barrier(bool cooperative, int blocks, int absent_block) {
  reset_grid_data();
  if (cooperative) {
    emu_launch_cooperative(grid_barrier_kernel, blocks, kCoopThreads, 0, nullptr, &g_grid, absent_block);
  } else {
    emu_launch(grid_barrier_kernel, blocks, kCoopThreads, 0, nullptr, &g_grid, absent_block);
  }
  return grid_barrier_result(blocks);
}

// Captures the cooperative launch (it must not run then), then replays the graph.
int grid_barrier_in_graph() {
  cudaStream_t stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  reset_grid_data();
  emu_launch_cooperative(grid_barrier_kernel, kCoopBlocks, kCoopThreads, 0, stream, &g_grid, kNoAbsentBlock);
  const bool ran_while_capturing = g_grid.arrivals != 0;
  cudaStreamEndCapture(stream, &graph);
  cudaGraphInstantiate(&exec, graph);
  cudaGraphLaunch(exec, stream);
  const int result = ran_while_capturing ? kWrongResult : grid_barrier_result(kCoopBlocks);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return result;
}

// ---- shared memory per block ------------------------------------------------------------------------------
constexpr int kSharedBlocks = 2, kSharedThreads = 64;
constexpr unsigned kPoisonWord = 0xffffffffu;  // four poison bytes

struct SharedData {
  unsigned arrivals;                   // both blocks count themselves in, then wait for both
  int wrong[kSharedBlocks];            // per block: the threads that read back another value than they wrote
  unsigned first_seen[kSharedBlocks];  // per block: the static variable before the block wrote it
};
SharedData g_shared_data;

int shared_value(int block, int thread) { return 1000 * (block + 1) + thread; }

// Every thread writes its value into the block's dynamic shared memory and thread 0 the block's index into a static
// variable; the block crosses a grid-barrier wait, then every thread reads both back.
void shared_per_block_kernel(SharedData* data) {
  __shared__ int block_index;
  extern __shared__ int values[];
  values[threadIdx.x] = shared_value((int)blockIdx.x, (int)threadIdx.x);
  if (threadIdx.x == 0) block_index = (int)blockIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&data->arrivals, 1u);
    emu::wait_until_at_least(&data->arrivals, gridDim.x);
  }
  __syncthreads();
  if (values[threadIdx.x] != shared_value((int)blockIdx.x, (int)threadIdx.x) || block_index != (int)blockIdx.x)
    atomicAdd(&data->wrong[blockIdx.x], 1);
}

// Thread 0 records what the static variable holds before the block writes it.
void shared_first_seen_kernel(SharedData* data) {
  __shared__ unsigned seen;
  if (threadIdx.x == 0) {
    data->first_seen[blockIdx.x] = seen;
    seen = blockIdx.x;
  }
}

void static_shared_too_large_kernel(int* out) {
  __shared__ char bytes[48 * 1024 + 1];
  bytes[threadIdx.x] = 1;
  out[threadIdx.x] = bytes[threadIdx.x];
}

int shared_per_block() {
  g_shared_data = {};
  emu_launch_cooperative(shared_per_block_kernel, kSharedBlocks, kSharedThreads, kSharedThreads * sizeof(int), nullptr,
                         &g_shared_data);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  for (int wrong : g_shared_data.wrong)
    if (wrong) return kWrongResult;
  return cudaSuccess;
}

// Twice, so the second launch's first block could find the first launch's leftovers: one block of each finds
// poison, the other block the index the first left.
int shared_starts_poisoned() {
  for (int launch = 0; launch < 2; launch++) {
    g_shared_data = {};
    emu_launch(shared_first_seen_kernel, kSharedBlocks, kSharedThreads, 0, nullptr, &g_shared_data);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return error;
    const unsigned* seen = g_shared_data.first_seen;
    if (!(seen[0] == kPoisonWord && seen[1] == 0) && !(seen[1] == kPoisonWord && seen[0] == 1)) return kWrongResult;
  }
  return cudaSuccess;
}

}  // namespace

extern "C" int emu_selftest(int which) {
  static int out[kBlock];
  cudaGetLastError();
  switch (which) {
    case kValidCollectives: emu_launch(collectives_kernel, 2, kBlock, 0, nullptr, out); break;
    case kBlockTooLarge: emu_launch(collectives_kernel, 1, 1025, 0, nullptr, out); break;
    case kBarrierAfterEarlyExit: emu_launch(early_exit_kernel, 1, kBlock, 0, nullptr, out); break;
    case kMixedBarriers: emu_launch(mixed_barriers_kernel, 1, kBlock, 0, nullptr, out); break;
    case kGridBarrier:
      if (emu::cooperative_max_blocks(kCoopThreads) != kCoopBlocks) return kWrongResult;
      return launch_grid_barrier(true, kCoopBlocks, kNoAbsentBlock);
    case kGridBarrierNotCooperative: return launch_grid_barrier(false, kCoopBlocks, kNoAbsentBlock);
    case kGridBarrierBlockAbsent: return launch_grid_barrier(true, kCoopBlocks, kCoopBlocks / 2);
    case kCooperativeTooLarge: return launch_grid_barrier(true, kCoopBlocks + 1, kNoAbsentBlock);
    case kGridBarrierInGraph: return grid_barrier_in_graph();
    case kSharedPerBlock: return shared_per_block();
    case kSharedStartsPoisoned: return shared_starts_poisoned();
    case kStaticSharedTooLarge: emu_launch(static_shared_too_large_kernel, 1, kBlock, 0, nullptr, out); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// The blocks in the order they arrived at the last grid-barrier launch's barriers, phase after phase, as the
// digits of a base-(kCoopBlocks + 1) number (the first arrival the most significant): two schedules that
// interleave the blocks differently give different numbers.
extern "C" long long emu_selftest_arrival_order() {
  long long order = 0;
  for (int i = 0; i < kPhases * kCoopBlocks; i++) order = order * (kCoopBlocks + 1) + g_grid.arrival_order[i];
  return order;
}
