// The bare launch for the .cu sources, identical under nvcc and the CPU emulator (cuda/emu/cuda_emu.h), and what a
// kernel body needs of where it runs. The ops launch through cuda/dispatch.h, which decides what a launch means in
// each launch mode.
#pragma once
#include <stdint.h>

#include <utility>

#include "device_counter.h"
#include "op_table.h"

// Hooks implemented by cuda/runtime.cu.
cudaStream_t rt_current_stream();
void rt_note_launch();                      // folds cudaGetLastError() into the sticky error
void rt_note_shape(dim3 grid, dim3 block);  // the launch's shape, kept while cu_plan_launch_shapes asks
void rt_fail(cudaError_t error);            // records an error found on the host (e.g. an unsupported shape)
int rt_sm_count();                          // multiprocessors on the current device
bool rt_overlapped();                       // while capturing the graph-pdl step: launches may overlap (below)

// launch_on: `kernel` on `stream` with static shared memory only, its error left to cudaGetLastError(); with
// programmatic stream serialization while rt_overlapped(). The emulator runs kernels one after another, so a
// programmatic launch is plain stream order there.
#ifdef __CUDACC__
// A launch with one launch attribute (programmatic serialization, cooperative) and `smem` bytes of dynamic shared
// memory.
template <typename... Params, typename... Args>
void launch_with(cudaLaunchAttribute attribute, cudaStream_t stream, void (*kernel)(Params...), dim3 grid, dim3 block,
                 size_t smem, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_on(cudaStream_t stream, void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  if (!rt_overlapped()) {
    kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  launch_with(attribute, stream, kernel, grid, block, 0, std::forward<Args>(args)...);
}
#else
template <typename... Params, typename... Args>
void launch_on(cudaStream_t stream, void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  emu_launch(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}
#endif

// Programmatic dependent launch (sm_90, the graph-pdl mode): a kernel may start while its predecessor runs, so it
// waits before it touches what an earlier kernel of the step writes or reads, and reads that coherently
// (cuda/cols.h). Weights it loads first; wait_for_predecessor(overlap) pins them before the wait with a fence
// (ptxas otherwise hoists the wait above them, and the fence keeps them issued together). Without the launch
// attribute the wait returns at once. let_successor_start: the next kernel's blocks may be scheduled now.
#if defined(__CUDACC__)
__device__ __forceinline__ void wait_for_predecessor(bool pin_earlier_loads = false) {
  if (pin_earlier_loads) asm volatile("fence.acq_rel.cta;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void let_successor_start() { asm volatile("griddepcontrol.launch_dependents;" :::); }
#else
inline void wait_for_predecessor(bool = false) {}
inline void let_successor_start() {}
#endif

// ---- the persistent step's look-ahead ----------------------------------------------------------------------
// Requests that L2 fetch lines nothing waits for (prefetch.global.L2; a no-op in the emulator, which has no L2):
// `rows` rows of `row_bytes` bytes each, `stride` bytes apart from `first`, and the same rows from `second` when it
// is set (attention's values beside its keys); no rows: nothing.
constexpr int kL2LineBytes = 128;
struct L2Lines {
  const char* first;
  const char* second;
  size_t stride;
  int rows, row_bytes;
};
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDACC__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}
// The block's threads share the lines out, one line each in turn; where rows do not start on a line, a row's last
// byte too (it may fall in one line more).
__device__ __forceinline__ void prefetch_lines_l2(const L2Lines& l) {
  const bool off_line = (reinterpret_cast<uintptr_t>(l.first) | l.stride) % kL2LineBytes != 0;
  const int lines = (l.row_bytes + kL2LineBytes - 1) / kL2LineBytes, per_row = lines + off_line;
  for (int k = (int)threadIdx.x; k < l.rows * per_row; k += (int)blockDim.x) {
    const int row = k / per_row, line = k % per_row;
    const size_t at = (size_t)row * l.stride + (line == lines ? l.row_bytes - 1 : line * kL2LineBytes);
    prefetch_l2(l.first + at);
    if (l.second) prefetch_l2(l.second + at);
  }
}

// What a resident block of the persistent step requests into L2 before it waits: its next virtual block of the same
// task (a task with more virtual blocks than resident blocks runs in rounds), and its first one of the next task.
struct LookAhead {
  L2Lines lines[2];  // the next round's, the next task's
  __device__ __forceinline__ L2Lines& next_round() { return lines[0]; }
  __device__ __forceinline__ L2Lines& next_task() { return lines[1]; }
};

// ---- where a kernel body runs -------------------------------------------------------------------------------
// A body (cuda/linear.h, attention.h, embed.h, lm_head.h) runs as a launch of its own (own_launch) or as virtual
// block `idx` of a persistent step task (cuda/persistent.cu). Either way it issues its weight loads, then
// wait_for_inputs(at), then reads what an earlier op wrote.
struct BlockPlace {
  uint3 idx;
  dim3 grid;
  unsigned* arrivals;        // the persistent step's grid barrier (null: a launch of its own)
  unsigned arrivals_needed;  // arrivals that mean the previous task is done (0: nothing to wait for)
  bool overlapped;           // a launch of its own that may overlap its predecessor (graph-pdl)
  const LookAhead*
      look_ahead;  // the persistent step: what to request into L2 behind the block's loads (in shared memory)
};
// A kernel's last parameter where it may overlap its predecessor (graph-pdl): then it pins its early loads before
// the wait. cuda/dispatch.h supplies it. A bool: as a class or an enum, ptxas gives the scalar bodies other registers.
using Overlap = bool;
__device__ __forceinline__ BlockPlace own_launch(Overlap overlap = false) {
  return {blockIdx, gridDim, nullptr, 0u, overlap, nullptr};
}

// The persistent step's grid barrier: a block counts itself in on `arrivals` when done with its share of a task, and
// waits, before it reads a task's inputs, until every block has arrived from every earlier task. Thread 0 arrives (a
// release after __syncthreads: cuda/device_counter.h) and polls (acquire loads, sleeping between them so 264 pollers
// leave the counter's L2 slice to the arrivals). The CTA fence keeps the loads issued before the wait before it, so
// a task's weights stream during the wait.
constexpr unsigned kPollFirstSleepNs = 32, kPollMaxSleepNs = 128;  // leads for the first GPU run's barrier probe
// kScFence: __threadfence then a relaxed atomic, which only the barrier probe runs, to measure what the release saves.
template <bool kScFence = false> __device__ __forceinline__ void grid_arrive(unsigned* arrivals) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if constexpr (kScFence) {
    __threadfence();
    atomicAdd(arrivals, 1u);
  } else {
    DeviceCounter(*arrivals).fetch_add(1u, cuda::std::memory_order_release);
  }
}
// kBackoff: sleep between polls (the step); without, polls back to back (the probe's sequentially consistent design).
template <bool kBackoff = true> __device__ __forceinline__ void grid_wait(unsigned* arrivals, unsigned needed) {
#if defined(__CUDACC__)
  asm volatile("fence.acq_rel.cta;" ::: "memory");
  if (threadIdx.x == 0) {
    const DeviceCounter count(*arrivals);
    // the first poll does not sleep; the load stays in the loop (hoisted, it would join the body's weight loads)
    unsigned ns = 0;
    do {
      if (kBackoff && ns) __nanosleep(ns);
      ns = ns ? min(2 * ns, kPollMaxSleepNs) : kPollFirstSleepNs;
    } while (count.load(cuda::std::memory_order_acquire) < needed);
  }
#else
  if (threadIdx.x == 0) emu::wait_until_at_least(arrivals, needed);
#endif
  __syncthreads();
}

// In the persistent step, before its wait (its first virtual block of a task) and its own loads issued, a block
// requests into L2 its second round of the task and what it reads first of the next task: queued behind its own,
// they keep the memory busy through this round's merge, the task's merge and the barrier after it. The
// __syncthreads before the poll orders nothing grid_wait does not; it stays until a GPU run measures the step
// without it.
__device__ __forceinline__ void wait_for_inputs(const BlockPlace& at) {
  if (!at.arrivals) {
    wait_for_predecessor(at.overlapped);
  } else if (at.arrivals_needed) {
#pragma unroll 1  // one loop of requests in every body, not two (the fp32 8-row bodies would spill)
    for (const L2Lines& lines : at.look_ahead->lines) prefetch_lines_l2(lines);
    __syncthreads();
    grid_wait(at.arrivals, at.arrivals_needed);
  }
}

// Records cudaErrorInvalidValue for what this library does not run (a storage type, a batch shape); true then.
inline bool rt_reject_unless(bool supported) {
  if (!supported) rt_fail(cudaErrorInvalidValue);
  return !supported;
}

constexpr int kVecWidth = 4;  // floats per 16-byte access
constexpr uintptr_t kVecAlignment = 16;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % kVecAlignment == 0; }
// Leading float4 of a flat buffer of n floats at every one of these pointers (0 if one is misaligned);
// the kernels finish the remaining n - 4 * count floats one by one.
template <typename... Ptrs> int vec4_count(int n, const Ptrs*... ptrs) {
  return (aligned16(ptrs) && ...) ? n / kVecWidth : 0;
}
// The same for rows of n floats: each row starts 16-byte aligned only when n % 4 == 0.
template <typename... Ptrs> int row_vec4_count(int n, const Ptrs*... ptrs) {
  return n % kVecWidth == 0 ? vec4_count(n, ptrs...) : 0;
}
// Rows a batched kernel is instantiated to accumulate for `rows` rows: 1, 2, 4 or MAX_BATCH, the fewest that hold
// them (the rest predicated off), so that a batch's instantiations stay four per kernel.
static_assert(MAX_BATCH == 8, "batched kernels are instantiated for 1, 2, 4 and 8 rows");
inline int batch_bucket(int rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : MAX_BATCH; }
// Calls f(std::integral_constant<int, batch_bucket(rows)>{}): the instantiation for those rows.
template <typename F> decltype(auto) with_batch_bucket(int rows, F&& f) {
  switch (batch_bucket(rows)) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: return f(std::integral_constant<int, MAX_BATCH>{});
  }
}
