// The persistent launch mode: a whole decode step as ONE cooperative kernel. Its blocks stay resident for the step
// and run the fused plan's ops as tasks, one after another: task i's virtual blocks (the blocks its own kernel
// would launch) are dealt round-robin to the resident blocks, each running the op's body (cuda/embed.h, linear.h,
// attention.h, lm_head.h) exactly as its own kernel does, so the step's results are the same bits. Between tasks a
// grid barrier (cuda/launch.h) replaces the kernel boundary: a block that has done its share of task i counts
// itself in, and a block waits for every block's arrival from task i before the first of its virtual blocks of
// task i + 1 reads an input, having already issued that body's weight loads, as programmatic launch overlaps a
// kernel boundary (graph-pdl), with no launch at all. Right behind those loads, before it waits, each block
// requests into L2 what its first virtual block of the task after reads (the look-ahead: weights, or attention's
// earlier cache rows), so the memory keeps streaming through this task's merge and the barrier that follows it.
//
// cu_graph_capture (cuda/runtime.cu) records the plan's launches as tasks (cuda/step_tasks.h), uploads them, and
// captures one cooperative launch of the instantiation for the plan's architecture, storage types and batch bucket.
#include "attention.h"
#include "embed.h"
#include "linear.h"
#include "lm_head.h"
#include "persistent.h"
#include "step_tasks.h"

constexpr int kStepThreads = 256;
static_assert(kStepThreads == kEmbedThreads && kStepThreads == kMatvecThreads && kStepThreads == kAttnThreads &&
                  kStepThreads == kLmHeadThreads,
              "every body runs on blocks of the same size");
// Resident blocks per SM the instantiation is compiled for: two (at most 128 registers per thread), or one where
// the batched 16-bit bodies would spill within 128 (the SASS check finds any local memory).
template <typename W, int kRows> __host__ __device__ constexpr int step_min_blocks_per_sm() {
  return sizeof(W) < 4 && kRows >= 4 ? 1 : 2;
}
int persistent_min_blocks_per_sm(int wdtype, int rows) {
  int n = 0;
  with_storage(wdtype, [&](auto w) {
    with_batch_bucket(rows, [&](auto r) { n = step_min_blocks_per_sm<decltype(w), decltype(r)::value>(); });
  });
  return n;
}

constexpr size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// The shared memory the bodies of one instantiation use, as one area (the largest body's). W: the weights' and
// the cache's storage type.
template <typename W, int kRows> struct StepShared {
  static constexpr int V = kVecOf<W>;
  using LnMatvec = MatvecShared<V, kRows, kInputLayernorm>;
  using RmsMatvec = MatvecShared<V, kRows, kInputRmsnorm>;
  using Matvec = MatvecShared<V, kRows, kInputAsIs>;
  using Attn = AttnShared<V>;
  static constexpr size_t kBytes = max_size(max_size(max_size(sizeof(LnMatvec), sizeof(RmsMatvec)), sizeof(Matvec)),
                                            max_size(sizeof(Attn), sizeof(LmHeadShared)));
};

template <typename Args> __device__ __forceinline__ const Args& task_args(const StepTask& task) {
  return *reinterpret_cast<const Args*>(task.args);
}

static_assert(kStepTaskArgBytes == max_size(max_size(sizeof(EmbedArgs), sizeof(MatvecArgs)),
                                            max_size(sizeof(AttnArgs), sizeof(LmHeadArgs))),
              "a task holds the largest of the bodies' arguments, and no more");

// A task as 16-byte pieces, in shared memory (StepTask itself has constructors, which __shared__ variables cannot).
constexpr int kTaskPieces = sizeof(StepTask) / sizeof(uint4);
static_assert(sizeof(StepTask) % sizeof(uint4) == 0 && kTaskPieces <= kStepThreads,
              "a task in 16-byte pieces, one per thread");
using SharedTask = uint4[kTaskPieces];

// The block's threads copy a task into shared memory, a piece each (visible after the next __syncthreads).
__device__ __forceinline__ const StepTask& copy_task(SharedTask& to, const StepTask& from) {
#ifdef PLANT_TASK_IN_GLOBAL  // planted for test/sass.test.ts: the bodies read their arguments from the task list
  return from;
#else
  if (threadIdx.x < kTaskPieces) to[threadIdx.x] = reinterpret_cast<const uint4*>(&from)[threadIdx.x];
  return *reinterpret_cast<const StepTask*>(to);
#endif
}

// Virtual block v of a grid as its (x, y, z) index, x fastest, as a launch numbers its blocks.
__device__ __forceinline__ uint3 virtual_block(dim3 grid, unsigned v) {
  return {v % grid.x, v / grid.x % grid.y, v / (grid.x * grid.y)};
}

// The bodies, a row per task kind (cuda/step_tasks.h STEP_TASK_KINDS), the list run_task and look_ahead_of switch
// over. run: one virtual block of the task, in the instantiation's shared memory; lines: what the virtual block
// at `at` reads first that L2 may fetch ahead (weights; attention's earlier cache rows; none for the embedding's two
// rows). test/sass.test.ts reads each row's run to find the body's instructions in the step kernel.
template <StepTaskKind> struct StepBody;
template <typename Shared> __device__ __forceinline__ Shared& shared_as(float4* shared) {
  return *reinterpret_cast<Shared*>(shared);
}
template <typename W> constexpr int kV = kVecOf<W>;

template <> struct StepBody<kTaskEmbed> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4*) {
    embed<W, kV<W>>(task_args<EmbedArgs>(t), at);
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask&, const BlockPlace&) {
    return {};
  }
};
template <> struct StepBody<kTaskLnQkv> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    matvec<W, kV<W>, kRows, kOpLnQkv>(task_args<MatvecArgs>(t), at,
                                      shared_as<typename StepShared<W, kRows>::LnMatvec>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return matvec_lines<W, kV<W>>(task_args<MatvecArgs>(t), at);
  }
};
template <> struct StepBody<kTaskAttention> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    attention<W, kV<W>>(task_args<AttnArgs>(t), at, shared_as<typename StepShared<W, kRows>::Attn>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return attention_lines<W>(task_args<AttnArgs>(t), at);
  }
};
template <> struct StepBody<kTaskLnLinearGelu> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    matvec<W, kV<W>, kRows, kOpLnLinearGelu>(task_args<MatvecArgs>(t), at,
                                             shared_as<typename StepShared<W, kRows>::LnMatvec>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return matvec_lines<W, kV<W>>(task_args<MatvecArgs>(t), at);
  }
};
template <> struct StepBody<kTaskLinearResidual> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    matvec<W, kV<W>, kRows, kOpLinearResidual>(task_args<MatvecArgs>(t), at,
                                               shared_as<typename StepShared<W, kRows>::Matvec>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return matvec_lines<W, kV<W>>(task_args<MatvecArgs>(t), at);
  }
};
template <> struct StepBody<kTaskLnLmHeadArgmax> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    lm_head<W, kV<W>, kRows, kLnLmHeadArgmax>(task_args<LmHeadArgs>(t), at, shared_as<LmHeadShared>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return lm_head_lines<W>(task_args<LmHeadArgs>(t), at);
  }
};
template <> struct StepBody<kTaskRmsQkvRope> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    matvec<W, kV<W>, kRows, kOpRmsQkvRope>(task_args<MatvecArgs>(t), at,
                                           shared_as<typename StepShared<W, kRows>::RmsMatvec>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return matvec_lines<W, kV<W>, kStoreQkvRope>(task_args<MatvecArgs>(t), at);
  }
};
template <> struct StepBody<kTaskRmsGateUp> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    matvec<W, kV<W>, kRows, kOpRmsGateUp>(task_args<MatvecArgs>(t), at,
                                          shared_as<typename StepShared<W, kRows>::RmsMatvec>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return matvec_lines<W, kV<W>, kStoreSwiglu>(task_args<MatvecArgs>(t), at);
  }
};
template <> struct StepBody<kTaskRmsLmHeadArgmax> {
  template <typename W, int kRows>
  __device__ __forceinline__ static void run(const StepTask& t, const BlockPlace& at, float4* s) {
    lm_head<W, kV<W>, kRows, kRmsLmHeadArgmax>(task_args<LmHeadArgs>(t), at, shared_as<LmHeadShared>(s));
  }
  template <typename W> __device__ __forceinline__ static L2Lines lines(const StepTask& t, const BlockPlace& at) {
    return lm_head_lines<W>(task_args<LmHeadArgs>(t), at);
  }
};

// The architectures' steps: each instantiation of the step kernel runs the bodies of its architecture's step and
// those every step shares (step_arch_of).
struct Gpt2Step {
  static constexpr int kArch = kStepGpt2;
};
struct LlamaStep {
  static constexpr int kArch = kStepLlama;
};
template <typename Arch> __host__ __device__ constexpr bool runs_body(int arch) {
  return arch == kStepNone || arch == Arch::kArch;
}

// One virtual block of a task (of one of the architecture's bodies: the recorder let no other in).
template <typename Arch, typename W, int kRows>
__device__ __forceinline__ void run_task(const StepTask& task, const BlockPlace& at, float4* shared) {
#define RUN_BODY(kind, arch)                                                                       \
  case kind:                                                                                       \
    if constexpr (runs_body<Arch>(arch)) StepBody<kind>::template run<W, kRows>(task, at, shared); \
    break;
  switch (task.kind) { STEP_TASK_KINDS(RUN_BODY) }
#undef RUN_BODY
}

// The look-ahead for a task's virtual block `v` (none past the task's blocks).
template <typename Arch, typename W>
__device__ __forceinline__ L2Lines look_ahead_of(const StepTask& task, unsigned v) {
  const dim3 grid = task.grid;
  if (v >= grid.x * grid.y * grid.z) return {};
  const BlockPlace at = {virtual_block(grid, v), grid, nullptr, 0u, false, nullptr};
#define BODY_LINES(kind, arch)                                                               \
  case kind:                                                                                 \
    if constexpr (runs_body<Arch>(arch)) return StepBody<kind>::template lines<W>(task, at); \
    break;
  switch (task.kind) { STEP_TASK_KINDS(BODY_LINES) }
#undef BODY_LINES
  return {};
}

// tasks: (n_tasks), run in order  grid: (resident blocks, all co-resident)  block: (kStepThreads)
// Arch: the architecture's step (Gpt2Step, LlamaStep); W: the weights' and the cache's storage type; kRows: the
// batch bucket
template <typename Arch, typename W, int kRows>
__global__ void __launch_bounds__(kStepThreads, step_min_blocks_per_sm<W, kRows>())
    persistent_step_kernel(const StepTask* tasks, int n_tasks, StepBarrier* barrier) {
  extern __shared__ float4 shared[];
  __shared__ LookAhead ahead;  // in shared memory rather than registers, which the bodies need
  // The task being run, copied into shared memory. Read from global memory, its arguments were reloaded after every
  // 16-byte load (an asm volatile, which the compiler assumes may write memory) and the next load waited for the
  // reload: the matvec and LM head bodies kept 1-2 loads in flight, not their kernels' 8 (the SASS check of the
  // persistent bodies). Two copies, task i in current[i % 2]: one would do (the __syncthreads in grid_arrive separates
  // a block's last reads of a task from its copy of the next), but at one fixed address ptxas keeps 4 of the fp32
  // single-row linear_residual body's 8 loads in flight.
  __shared__ SharedTask current[2];
  for (int i = 0; i < n_tasks; i++) {
    const StepTask& task = copy_task(current[i % 2], tasks[i]);
    // the first virtual block a resident block takes waits for every block's arrival from the previous tasks,
    // having requested its next round and its first lines of the next task into L2 (wait_for_inputs)
    // two warps work them out side by side (each a chain of dependent loads of the task list), neither copying the task
    if (threadIdx.x == kWarpSize) ahead.next_round() = look_ahead_of<Arch, W>(tasks[i], blockIdx.x + gridDim.x);
    if (threadIdx.x == 2 * kWarpSize)
      ahead.next_task() = i + 1 < n_tasks ? look_ahead_of<Arch, W>(tasks[i + 1], blockIdx.x) : L2Lines{};
    __syncthreads();
    const dim3 grid = task.grid;
    const unsigned virtual_blocks = grid.x * grid.y * grid.z;
    BlockPlace at = {{0, 0, 0}, grid, &barrier->arrivals, (unsigned)i * gridDim.x, false, &ahead};
    for (unsigned v = blockIdx.x; v < virtual_blocks; v += gridDim.x) {
      // a later round has no wait to request behind: from the second on, the round after it is requested first
      if (v >= blockIdx.x + gridDim.x && v + gridDim.x < virtual_blocks) {
        if (threadIdx.x == 0) ahead.next_round() = look_ahead_of<Arch, W>(task, v + gridDim.x);
        __syncthreads();
        prefetch_lines_l2(ahead.next_round());
      }
      at.idx = virtual_block(grid, v);
      run_task<Arch, W, kRows>(task, at, shared);
      at.arrivals_needed = 0;
      __syncthreads();  // the next virtual block reuses the shared memory
    }
    // A block with no virtual block of this task waits too before it counts itself in: on a counter that only
    // grows, an arrival from a later task must never stand in for a block still at work on an earlier one.
    if (at.arrivals_needed) wait_for_inputs(at);
    if (i + 1 < n_tasks) grid_arrive(&barrier->arrivals);  // nothing waits for the last task: its end is the kernel's
  }
  // Every block saw all (n_tasks - 1) x blocks arrivals before it leaves, so when the last one leaves no arrival
  // is in flight and no block reads the counter again: the next launch starts from zero (arrive_last resets the
  // departures).
  __shared__ bool last_to_leave;
  if (arrive_last(&barrier->departures, gridDim.x, &last_to_leave) && threadIdx.x == 0) barrier->arrivals = 0;
}

// The instantiation for the architecture's step, weights and cache in W and batch bucket kRows, with its shared memory.
template <typename Arch, typename W, int kRows> static void pick(StepLaunch* out) {
  out->kernel = persistent_step_kernel<Arch, W, kRows>;
  out->shared_bytes = StepShared<W, kRows>::kBytes;
}
template <typename W> static void pick_for(int arch, int rows, StepLaunch* out) {
  with_batch_bucket(rows, [&](auto bucket) {
    constexpr int kRows = decltype(bucket)::value;
    if (arch == kStepLlama)
      pick<LlamaStep, W, kRows>(out);
    else
      pick<Gpt2Step, W, kRows>(out);
  });
}

// Blocks of the kernel that fit on the device at once (a cooperative launch needs them all resident).
static cudaError_t resident_blocks(StepKernel kernel, size_t shared_bytes, int* out) {
#ifdef __CUDACC__
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared_bytes);
  int per_sm = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStepThreads, shared_bytes);
  *out = per_sm * rt_sm_count();
  return e != cudaSuccess ? e : per_sm > 0 ? cudaSuccess : cudaErrorInvalidConfiguration;
#else
  (void)kernel, (void)shared_bytes;
  *out = emu::cooperative_max_blocks(kStepThreads);
  return cudaSuccess;
#endif
}

template <typename... Params, typename... Args>
static void launch_cooperative(void (*kernel)(Params...), int blocks, size_t shared_bytes, cudaStream_t stream,
                               Args&&... args) {
#ifdef __CUDACC__
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  launch_with(attribute, stream, kernel, dim3(blocks), dim3(kStepThreads), shared_bytes, std::forward<Args>(args)...);
#else
  emu_launch_cooperative(kernel, dim3(blocks), dim3(kStepThreads), shared_bytes, stream, std::forward<Args>(args)...);
#endif
}

cudaError_t persistent_step_prepare(const StepRecorder& recorded, StepLaunch* out) {
  const StepVariant& v = recorded.variant();
  // instantiated for a cache in the weights' storage type
  if (!recorded.supported() || (v.kvdtype != kStepNone && v.kvdtype != v.wdtype)) return cudaErrorNotSupported;
  *out = {};
  out->n_tasks = (int)recorded.tasks().size();
  with_storage(v.wdtype, [&](auto w) { pick_for<decltype(w)>(v.arch, v.rows, out); });
  return resident_blocks(out->kernel, out->shared_bytes, &out->blocks);
}

static size_t tasks_bytes(int n_tasks) { return (size_t)n_tasks * sizeof(StepTask); }
size_t persistent_buffer_bytes(int n_tasks) { return tasks_bytes(n_tasks) + sizeof(StepBarrier); }

void persistent_step_launch(const StepLaunch& launch, void* device_buffer, cudaStream_t stream) {
  const auto* tasks = static_cast<const StepTask*>(device_buffer);
  auto* barrier = reinterpret_cast<StepBarrier*>(static_cast<char*>(device_buffer) + tasks_bytes(launch.n_tasks));
  launch_cooperative(launch.kernel, launch.blocks, launch.shared_bytes, stream, tasks, launch.n_tasks, barrier);
}

// ---- what the grid barrier costs --------------------------------------------------------------------------------
// Skewed arrivals: before barrier i, block b spins skew_cycles x ((b + i) % kBarrierSkewSpread) SM cycles, so the
// blocks come in at different times, the last a different one each time, as blocks finish a task's share.
constexpr int kBarrierSkewSpread = 8;
constexpr long long kBarrierSkewCycles = 256;  // up to 1,792 cycles apart: ~0.9 µs at the H200's 1.98 GHz
__device__ __forceinline__ void spin_cycles(long long cycles) {
  for (const long long start = clock64(); clock64() - start < cycles;) {
  }
}

// n grid barriers in a row, as the step crosses one between tasks: each block counts itself in, then waits for all
// (kScFence: the sequentially consistent design with polls back to back, for comparison), each after its skew.
// arrivals: (1), zero at launch  grid: (resident blocks, all co-resident)  block: (kStepThreads)
template <bool kScFence>
__global__ void __launch_bounds__(kStepThreads)
    runtime_grid_barrier_kernel(unsigned* arrivals, int n, long long skew_cycles) {
  for (int i = 0; i < n; i++) {
    spin_cycles(skew_cycles * (long long)((blockIdx.x + i) % kBarrierSkewSpread));
    grid_arrive<kScFence>(arrivals);
    grid_wait<!kScFence>(arrivals, (unsigned)(i + 1) * gridDim.x);
  }
}
// The skewed run's spins alone: every block spins the longest skew n times, with no barrier.
// grid: (blocks)  block: (kStepThreads)
__global__ void __launch_bounds__(kStepThreads) runtime_skew_kernel(int n, long long skew_cycles) {
  for (int i = 0; i < n; i++) spin_cycles(skew_cycles * (kBarrierSkewSpread - 1));
}

cudaError_t persistent_barrier_blocks(int* blocks) {
  StepLaunch step = {};
  pick<Gpt2Step, float, 1>(&step);  // GPT-2's fp32 single-sequence step's grid
  return resident_blocks(step.kernel, step.shared_bytes, blocks);
}

cudaError_t persistent_barrier_launch(const BarrierProbe& probe, unsigned* arrivals, int n, int blocks,
                                      cudaStream_t stream) {
  const long long skew = probe.skewed ? kBarrierSkewCycles : 0;
  switch (probe.kind) {
    case BarrierProbe::kStep:
      launch_cooperative(runtime_grid_barrier_kernel<false>, blocks, 0, stream, arrivals, n, skew);
      break;
    case BarrierProbe::kScFence:
      launch_cooperative(runtime_grid_barrier_kernel<true>, blocks, 0, stream, arrivals, n, skew);
      break;
    case BarrierProbe::kSkewAlone:
      launch_cooperative(runtime_skew_kernel, blocks, 0, stream, n, kBarrierSkewCycles);
      break;
  }
  return cudaGetLastError();
}
