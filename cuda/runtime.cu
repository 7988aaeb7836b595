// runtime.h and cuda_api.h on the CUDA runtime. Errors: every call returns its cudaError_t; kernel launches
// and failed handle creations fold theirs into a sticky error that be_last_error() reads and clears.
#include <stddef.h>
#include <string.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdint>

#include "cuda_api.h"
#include "launch.h"
#include "persistent.h"
#include "runtime.h"

constexpr int kFillThreads = 256;
constexpr int kFillMaxBlocks = 4096;  // grid-stride beyond this
constexpr int kPeakThreads = 256;
constexpr int kPeakBlocksPerSm = 8;
constexpr int kPeakChains = 8;  // independent FMA chains per thread, enough to hide the FMA latency
#ifdef __CUDACC__
constexpr int kPeakIters = 4096;
#else
constexpr int kPeakIters = 16;  // the emulator's "peak" means nothing; 4096 rounds cost half a minute on the CPU
#endif
constexpr int kFlopsPerFma = 2;

namespace {
int g_device = 0;
int g_sm_count = 0;
cudaStream_t g_own_stream = nullptr;  // created by be_init
cudaStream_t g_stream = nullptr;      // current stream; the legacy stream until be_init
int g_sticky = cudaSuccess;
bool g_overlapped = false;                // while capturing the graph-pdl step: launches allow programmatic overlap
StepRecorder* g_step_recorder = nullptr;  // while recording the persistent step: launchers append tasks to it
// while cu_plan_launch_shapes runs: where the dispatcher writes each launch's grid and block
CuLaunchShape* g_shapes = nullptr;
int g_shapes_max = 0, g_shapes_count = 0;

int note(cudaError_t error) {
  if (error != cudaSuccess && g_sticky == cudaSuccess) g_sticky = error;
  return error;
}

struct CuGraph {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  void* step_buffer;  // the persistent step's tasks and barrier (null for the other captures)
};

// Device memory and events released on scope exit (for the measurements' early returns).
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() { cudaFree(ptr); }
};
struct EventPair {
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t create() {
    cudaError_t e = cudaEventCreate(&start);
    return e != cudaSuccess ? e : cudaEventCreate(&end);
  }
  float elapsed_ms() const {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, end);
    return ms;
  }
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (end) cudaEventDestroy(end);
  }
};
}  // namespace

// ---- hooks for the kernels (cuda/launch.h) ------------------------------------------------------------------
cudaStream_t rt_current_stream() { return g_stream; }
void rt_note_launch() { note(cudaGetLastError()); }
void rt_fail(cudaError_t error) { note(error); }
int rt_sm_count() {
  if (g_sm_count == 0 && cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, g_device) != cudaSuccess)
    g_sm_count = 1;
  return g_sm_count;
}

bool rt_overlapped() { return g_overlapped; }
StepRecorder* rt_step_recorder() { return g_step_recorder; }
void rt_note_shape(dim3 grid, dim3 block) {
  if (!g_shapes) return;
  if (g_shapes_count < g_shapes_max) {
    CuLaunchShape& s = g_shapes[g_shapes_count];
    s = {{(int32_t)grid.x, (int32_t)grid.y, (int32_t)grid.z}, {(int32_t)block.x, (int32_t)block.y, (int32_t)block.z}};
  }
  g_shapes_count++;
}

// ---- kernels of the runtime itself --------------------------------------------------------------------------
// dst: (count) = value    grid: (min(ceil(count / kFillThreads), kFillMaxBlocks))  block: (kFillThreads), grid-stride
__global__ void __launch_bounds__(kFillThreads) runtime_fill_u32_kernel(uint32_t* dst, uint32_t value, size_t count) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = value;
}

// sink: (1), written only if the chains sum to `seed` (never, in practice; it keeps the FMAs alive)
// grid: (SMs * kPeakBlocksPerSm)  block: (kPeakThreads); kPeakChains independent FMA chains of `iters` steps per thread
__global__ void __launch_bounds__(kPeakThreads) runtime_fma_peak_kernel(float* sink, float seed, int iters) {
  float v[kPeakChains];
#pragma unroll
  for (int c = 0; c < kPeakChains; c++) v[c] = seed + threadIdx.x + c;
  const float a = 1.0f - seed, b = seed;
  for (int it = 0; it < iters; it++)
#pragma unroll
    for (int c = 0; c < kPeakChains; c++) v[c] = fmaf(v[c], a, b);
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kPeakChains; c++) sum += v[c];
  if (sum == seed) *sink = sum;
}

// ---- runtime.h --------------------------------------------------------------------------------------------------
extern "C" int be_init(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFree(nullptr);  // creates the context now rather than inside the first timed call
  if (e == cudaSuccess && !g_own_stream) e = cudaStreamCreateWithFlags(&g_own_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  g_device = device;
  g_sm_count = 0;
  g_stream = g_own_stream;
  return cudaSuccess;
}

extern "C" int be_last_error(void) {
  note(cudaGetLastError());
  const int e = g_sticky;
  g_sticky = cudaSuccess;
  return e;
}

extern "C" const char* be_error_name(int code) { return cudaGetErrorName(static_cast<cudaError_t>(code)); }
extern "C" const char* be_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

// Zero-filled, as runtime.h promises: the cache and activations are never cleared by callers, and attention
// scratch counters start at zero (cuda/attention.cu).
extern "C" void* be_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes, g_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(g_stream);
  if (e == cudaSuccess) return p;
  cudaFree(p);
  note(e);
  return nullptr;
}

extern "C" void* be_alloc_whole(size_t bytes) { return be_alloc(bytes); }

extern "C" int be_free(void* ptr) { return cudaFree(ptr); }

extern "C" int be_upload(void* dst, const void* host_src, size_t bytes) {
  cudaError_t e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, g_stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(g_stream);
}

extern "C" int be_download(void* host_dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, g_stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(g_stream);
}

extern "C" int be_upload_matrix(void* dst, const void* host_src, uint64_t first, uint64_t count, int, int,
                                int element_bytes) {
  return be_upload(static_cast<char*>(dst) + first * element_bytes, host_src, count * element_bytes);
}

extern "C" int be_copy(void* dst, const void* src, size_t bytes) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream);
}

// Stream-ordered: the fill lands before any later work on the current stream.
extern "C" int be_fill_u32(void* dst, uint32_t value, size_t count) {
  if (count == 0) return cudaSuccess;
  const size_t blocks = (count + kFillThreads - 1) / kFillThreads;
  const int grid = blocks < (size_t)kFillMaxBlocks ? (int)blocks : kFillMaxBlocks;
  launch_on(g_stream, runtime_fill_u32_kernel, grid, kFillThreads, static_cast<uint32_t*>(dst), value, count);
  return cudaGetLastError();
}

// Waits for the device, then reports (and clears) any launch error since the last check: an eager step's
// failed launch surfaces here rather than passing for a fast step.
extern "C" int be_synchronize(void) {
  const cudaError_t e = cudaDeviceSynchronize();
  return e != cudaSuccess ? e : be_last_error();
}

extern "C" int be_mem_info(uint64_t* out) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
  out[0] = free_bytes;
  out[1] = total_bytes;
  return e;
}

// ---- cuda_api.h: devices ------------------------------------------------------------------------------------
extern "C" int cu_device_count(int* out) {
  *out = 0;
  return cudaGetDeviceCount(out);
}

static cudaError_t device_attribute(int32_t* out, cudaDeviceAttr attr, int device) {
  int value = 0;
  cudaError_t e = cudaDeviceGetAttribute(&value, attr, device);
  *out = value;
  return e;
}

extern "C" int cu_device_info(int device, CuDeviceInfo* out) {
  *out = CuDeviceInfo{};
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  memcpy(out->name, prop.name, sizeof out->name);
  out->name[sizeof out->name - 1] = '\0';
  out->total_mem_bytes = prop.totalGlobalMem;
  const struct {
    int32_t* field;
    cudaDeviceAttr attr;
  } attributes[] = {
      {&out->cc_major, cudaDevAttrComputeCapabilityMajor},
      {&out->cc_minor, cudaDevAttrComputeCapabilityMinor},
      {&out->sm_count, cudaDevAttrMultiProcessorCount},
      {&out->sm_clock_khz, cudaDevAttrClockRate},  // CUDA 13 dropped cudaDeviceProp::clockRate
      {&out->mem_clock_khz, cudaDevAttrMemoryClockRate},
      {&out->mem_bus_width_bits, cudaDevAttrGlobalMemoryBusWidth},
      {&out->l2_bytes, cudaDevAttrL2CacheSize},
      {&out->max_smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
  };
  for (const auto& a : attributes)
    if ((e = device_attribute(a.field, a.attr, device)) != cudaSuccess) return e;
  int version = 0;
  if ((e = cudaDriverGetVersion(&version)) != cudaSuccess) return e;
  out->driver_version = version;
  if ((e = cudaRuntimeGetVersion(&version)) != cudaSuccess) return e;
  out->runtime_version = version;
  return cudaSuccess;
}

// ---- streams and events ---------------------------------------------------------------------------------------
extern "C" void* cu_stream_create(void) {
  cudaStream_t s = nullptr;
  return note(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) == cudaSuccess ? s : nullptr;
}

extern "C" int cu_stream_destroy(void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!s || s == g_own_stream) return cudaErrorInvalidResourceHandle;
  if (g_stream == s) g_stream = g_own_stream;
  return cudaStreamDestroy(s);
}

extern "C" int cu_set_stream(void* stream) {
  g_stream = stream ? static_cast<cudaStream_t>(stream) : g_own_stream;
  return cudaSuccess;
}

extern "C" int cu_sync_stream(void) { return cudaStreamSynchronize(g_stream); }

extern "C" void* cu_event_create(void) {
  cudaEvent_t e = nullptr;
  return note(cudaEventCreate(&e)) == cudaSuccess ? e : nullptr;
}
extern "C" int cu_event_record(void* event) { return cudaEventRecord(static_cast<cudaEvent_t>(event), g_stream); }
extern "C" int cu_event_synchronize(void* event) { return cudaEventSynchronize(static_cast<cudaEvent_t>(event)); }
extern "C" int cu_event_elapsed_ms(void* start, void* end, float* out) {
  return cudaEventElapsedTime(out, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
}
extern "C" int cu_event_destroy(void* event) { return cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

// ---- graphs and eager replay --------------------------------------------------------------------------------------
// The persistent step: the plan's launches recorded as tasks, the instantiation and grid picked, and the tasks
// uploaded to a fresh device buffer (*buffer, the caller frees it), all before the capture.
static cudaError_t prepare_persistent_step(const Plan* plan, StepLaunch* launch, void** buffer) {
  StepRecorder recorder;
  g_step_recorder = &recorder;
  const int run_error = plan_run(plan);  // records tasks, launches nothing
  g_step_recorder = nullptr;
  if (run_error != cudaSuccess) return static_cast<cudaError_t>(run_error);
  cudaError_t e = persistent_step_prepare(recorder, launch);
  const size_t bytes = persistent_buffer_bytes(launch->n_tasks);
  if (e == cudaSuccess) e = cudaMalloc(buffer, bytes);
  if (e == cudaSuccess) e = cudaMemsetAsync(*buffer, 0, bytes, g_stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(*buffer, recorder.tasks().data(), launch->n_tasks * sizeof(StepTask), cudaMemcpyHostToDevice,
                        g_stream);
  return e == cudaSuccess ? cudaStreamSynchronize(g_stream) : e;
}

extern "C" void* cu_graph_capture(const Plan* plan, int kind) {
  if (kind != CU_CAPTURE_PLAIN && kind != CU_CAPTURE_PROGRAMMATIC && kind != CU_CAPTURE_PERSISTENT)
    return note(cudaErrorInvalidValue), nullptr;
  const bool persistent = kind == CU_CAPTURE_PERSISTENT;
  StepLaunch launch = {};
  void* step_buffer = nullptr;
  cudaError_t e = persistent ? prepare_persistent_step(plan, &launch, &step_buffer) : cudaSuccess;
  if (e == cudaSuccess) e = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaFree(step_buffer);
    return note(e), nullptr;
  }
  int run_error = cudaSuccess;
  if (persistent) {
    persistent_step_launch(launch, step_buffer, g_stream);
    run_error = cudaGetLastError();
  } else {
    g_overlapped = kind == CU_CAPTURE_PROGRAMMATIC;
    run_error = plan_run(plan);  // launches are recorded, not run
    g_overlapped = false;
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(g_stream, &graph);
  if (run_error != cudaSuccess && e == cudaSuccess) e = static_cast<cudaError_t>(run_error);
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaFree(step_buffer);
    return note(e), nullptr;
  }
  return new CuGraph{graph, exec, step_buffer};
}

extern "C" int cu_plan_launch_shapes(const Plan* plan, CuLaunchShape* out, int max) {
  cudaError_t e = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return -e;
  g_shapes = out, g_shapes_max = max, g_shapes_count = 0;
  const int run_error = plan_run(plan);  // recorded into a graph that is never instantiated
  g_shapes = nullptr;
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(g_stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  if (e == cudaSuccess && run_error != cudaSuccess) e = static_cast<cudaError_t>(run_error);
  return e == cudaSuccess ? g_shapes_count : -e;
}

extern "C" int cu_graph_launch(void* graph, int n) {
  if (!graph) return cudaErrorInvalidResourceHandle;
  for (int i = 0; i < n; i++) {
    cudaError_t e = cudaGraphLaunch(static_cast<CuGraph*>(graph)->exec, g_stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" int cu_graph_kernel_nodes(void* graph) {
  if (!graph) return -cudaErrorInvalidResourceHandle;
  cudaGraph_t g = static_cast<CuGraph*>(graph)->graph;
  size_t count = 0;
  cudaError_t e = cudaGraphGetNodes(g, nullptr, &count);
  if (e != cudaSuccess) return -e;
  cudaGraphNode_t* nodes = new cudaGraphNode_t[count ? count : 1];
  e = cudaGraphGetNodes(g, nodes, &count);
  int kernels = 0;
  for (size_t i = 0; e == cudaSuccess && i < count; i++) {
    cudaGraphNodeType type;
    e = cudaGraphNodeGetType(nodes[i], &type);
    kernels += e == cudaSuccess && type == cudaGraphNodeTypeKernel;
  }
  delete[] nodes;
  return e == cudaSuccess ? kernels : -e;
}

extern "C" int cu_graph_destroy(void* graph) {
  if (!graph) return cudaErrorInvalidResourceHandle;
  CuGraph* g = static_cast<CuGraph*>(graph);
  cudaError_t e = cudaGraphExecDestroy(g->exec);
  const cudaError_t e2 = cudaGraphDestroy(g->graph);
  const cudaError_t e3 = cudaFree(g->step_buffer);
  delete g;
  if (e == cudaSuccess && e2 == cudaSuccess) return e3;
  return e != cudaSuccess ? e : e2;
}

extern "C" int cu_plan_run_n(const Plan* plan, int n) {
  for (int i = 0; i < n; i++) {
    const int e = plan_run(plan);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// ---- the launch floor: empty kernels ------------------------------------------------------------------------------
// launch: (1) x (1); does nothing, so its cost is all launch
__global__ void runtime_empty_kernel(int) {}
// launch: (1) x (1); lets its successor start and waits for its predecessor, as every kernel of the graph-pdl step
__global__ void runtime_pdl_empty_kernel(int) {
  let_successor_start();
  wait_for_predecessor();
}

// Device µs per node of a graph of n `kernel` launches (captured with programmatic dependent launch when
// `programmatic`), from the second replay (the first uploads it).
static cudaError_t time_graph_nodes(int n, void (*kernel)(int), bool programmatic, EventPair& events,
                                    double* us_per_node) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return e;
  g_overlapped = programmatic;
  for (int i = 0; i < n; i++) launch_on(g_stream, kernel, 1, 1, i);
  g_overlapped = false;
  const cudaError_t launched = cudaGetLastError();  // a failed launch ends the capture's validity; its error is ours
  e = cudaStreamEndCapture(g_stream, &graph);
  if (e != cudaSuccess && launched != cudaSuccess) e = launched;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, g_stream);
  if (e == cudaSuccess) e = cudaEventRecord(events.start, g_stream);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, g_stream);
  if (e == cudaSuccess) e = cudaEventRecord(events.end, g_stream);
  if (e == cudaSuccess) e = cudaEventSynchronize(events.end);
  if (e == cudaSuccess) *us_per_node = events.elapsed_ms() * 1e3 / n;
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return e;
}

// launch: (1) x (1); spins `cycles` SM cycles, so that the launches enqueued behind it find a full queue
__global__ void runtime_spin_kernel(long long cycles) {
  for (const long long start = clock64(); clock64() - start < cycles;) {
  }
}

// Empty kernels a spin kernel holds back for the device's rate: the launches queued behind one kernel before the
// host blocks are bounded (about a thousand), so the back-to-back run stays well inside them.
constexpr int kQueuedEmptyKernels = 500;

// Launches n empty kernels eagerly (after one warm-up), then replays them captured as one graph, plainly and with
// programmatic dependent launch: out[0] host µs per launch call, out[1] device µs per kernel launched back to back
// (the launch rate the GPU sustains: kQueuedEmptyKernels of them enqueued behind a spin kernel that outlasts their
// issue, so the queue is full when they start, as in the usual launch-latency microbenchmarks; issued without it,
// they would measure the host's rate), out[2] device µs per kernel node of a graph replay, out[3] per node of the
// graph-pdl kind (NaN where that capture fails: a device without programmatic launch; the rest still stands).
extern "C" int cu_measure_launch(int n, double* out) {
  out[0] = out[1] = out[2] = out[3] = 0.0;
  if (n <= 0) return cudaErrorInvalidValue;
  EventPair events;
  cudaError_t e = events.create();
  if (e != cudaSuccess) return e;
  launch_on(g_stream, runtime_empty_kernel, 1, 1, 0);
  if ((e = cudaStreamSynchronize(g_stream)) != cudaSuccess) return e;

  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) launch_on(g_stream, runtime_empty_kernel, 1, 1, i);
  const auto t1 = std::chrono::steady_clock::now();
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  if ((e = cudaStreamSynchronize(g_stream)) != cudaSuccess) return e;
  out[0] = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;

  // the spin outlasts twice the queued launches' issue, and 2 ms at least
  int clock_khz = 0;
  if ((e = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, g_device)) != cudaSuccess) return e;
  const double spin_us = std::max(2000.0, 2.0 * kQueuedEmptyKernels * out[0]);
  launch_on(g_stream, runtime_spin_kernel, 1, 1, (long long)(spin_us * clock_khz / 1e3));
  if ((e = cudaEventRecord(events.start, g_stream)) != cudaSuccess) return e;
  for (int i = 0; i < kQueuedEmptyKernels; i++) launch_on(g_stream, runtime_empty_kernel, 1, 1, i);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  if ((e = cudaEventRecord(events.end, g_stream)) != cudaSuccess) return e;
  if ((e = cudaEventSynchronize(events.end)) != cudaSuccess) return e;
  out[1] = events.elapsed_ms() * 1e3 / kQueuedEmptyKernels;

  if ((e = time_graph_nodes(n, runtime_empty_kernel, false, events, &out[2])) != cudaSuccess) return e;
  if (time_graph_nodes(n, runtime_pdl_empty_kernel, true, events, &out[3]) != cudaSuccess) {
    out[3] = std::nan("");
    cudaGetLastError();
  }
  return cudaSuccess;
}

// Device ms of one probe launch of n (persistent_barrier_launch), its counter zeroed first.
static cudaError_t time_barrier_probe(BarrierProbe probe, unsigned* counter, int n, int blocks, EventPair& events,
                                      double* ms) {
  cudaError_t e = cudaMemsetAsync(counter, 0, sizeof(unsigned), g_stream);
  if (e == cudaSuccess) e = cudaEventRecord(events.start, g_stream);
  if (e == cudaSuccess) e = persistent_barrier_launch(probe, counter, n, blocks, g_stream);
  if (e == cudaSuccess) e = cudaEventRecord(events.end, g_stream);
  if (e == cudaSuccess) e = cudaEventSynchronize(events.end);
  if (e == cudaSuccess) *ms = events.elapsed_ms();
  return e;
}

// n grid barriers in a row on the fp32 single-sequence step's resident blocks, after a warm-up launch: out[0] device
// µs per barrier of the step's design with every block arriving at once, out[1] the blocks that met at each,
// out[2] the same with skewed arrivals (their spins alone subtracted: what the barrier adds after the last
// arrival), out[3] and out[4] the sequentially consistent design without and with skew.
extern "C" int cu_measure_grid_barrier(int n, double* out) {
  for (int i = 0; i < 5; i++) out[i] = 0.0;
  if (n <= 0) return cudaErrorInvalidValue;
  DeviceBuffer arrivals;
  EventPair events;
  int blocks = 0;
  cudaError_t e = persistent_barrier_blocks(&blocks);
  if (e == cudaSuccess && (uint64_t)n * (uint64_t)blocks > UINT32_MAX)
    e = cudaErrorInvalidValue;  // the counter's range
  if (e == cudaSuccess) e = cudaMalloc(&arrivals.ptr, sizeof(unsigned));
  if (e == cudaSuccess) e = events.create();
  if (e != cudaSuccess) return e;
  auto* counter = static_cast<unsigned*>(arrivals.ptr);
  const auto time = [&](BarrierProbe probe, double* ms) {
    return time_barrier_probe(probe, counter, n, blocks, events, ms);
  };
  double warm = 0, step = 0, step_skewed = 0, sc = 0, sc_skewed = 0, skew_alone = 0;
  // each kernel once untimed first: the module loads its functions lazily, at their first launch
  for (BarrierProbe::Kind kind : {BarrierProbe::kStep, BarrierProbe::kScFence, BarrierProbe::kSkewAlone})
    if ((e = time({kind, true}, &warm)) != cudaSuccess) return e;
  if ((e = time({BarrierProbe::kStep, false}, &step)) != cudaSuccess) return e;
  if ((e = time({BarrierProbe::kSkewAlone, true}, &skew_alone)) != cudaSuccess) return e;
  if ((e = time({BarrierProbe::kStep, true}, &step_skewed)) != cudaSuccess) return e;
  if ((e = time({BarrierProbe::kScFence, false}, &sc)) != cudaSuccess) return e;
  if ((e = time({BarrierProbe::kScFence, true}, &sc_skewed)) != cudaSuccess) return e;
  const double us_per = 1e3 / n;
  out[0] = step * us_per;
  out[1] = blocks;
  out[2] = (step_skewed - skew_alone) * us_per;
  out[3] = sc * us_per;
  out[4] = (sc_skewed - skew_alone) * us_per;
  return cudaSuccess;
}

// ---- peaks measured on the spot ----------------------------------------------------------------------------------
extern "C" int cu_measure_copy_bandwidth(uint64_t bytes, int iters, double* out_bytes_per_s) {
  *out_bytes_per_s = 0.0;
  if (bytes == 0 || iters <= 0) return cudaErrorInvalidValue;
  DeviceBuffer src, dst;
  EventPair events;
  cudaError_t e = cudaMalloc(&src.ptr, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dst.ptr, bytes);
  if (e == cudaSuccess) e = events.create();
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g_stream);  // warm-up
  if (e == cudaSuccess) e = cudaEventRecord(events.start, g_stream);
  for (int i = 0; e == cudaSuccess && i < iters; i++)
    e = cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g_stream);
  if (e == cudaSuccess) e = cudaEventRecord(events.end, g_stream);
  if (e == cudaSuccess) e = cudaEventSynchronize(events.end);
  if (e != cudaSuccess) return e;
  const double seconds = events.elapsed_ms() / 1e3;
  *out_bytes_per_s = seconds > 0 ? 2.0 * (double)bytes * iters / seconds : 0.0;  // read + write
  return cudaSuccess;
}

extern "C" int cu_measure_fp32_peak(double* out_flops_per_s) {
  *out_flops_per_s = 0.0;
  DeviceBuffer sink;
  EventPair events;
  const int blocks = rt_sm_count() * kPeakBlocksPerSm;
  const float seed = 0.5f;
  cudaError_t e = cudaMalloc(&sink.ptr, sizeof(float));
  if (e == cudaSuccess) e = events.create();
  if (e != cudaSuccess) return e;
  float* out = static_cast<float*>(sink.ptr);
  launch_on(g_stream, runtime_fma_peak_kernel, blocks, kPeakThreads, out, seed, kPeakIters);  // warm-up
  e = cudaEventRecord(events.start, g_stream);
  launch_on(g_stream, runtime_fma_peak_kernel, blocks, kPeakThreads, out, seed, kPeakIters);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaEventRecord(events.end, g_stream);
  if (e == cudaSuccess) e = cudaEventSynchronize(events.end);
  if (e != cudaSuccess) return e;
  const double seconds = events.elapsed_ms() / 1e3;
  const double flops = (double)kFlopsPerFma * kPeakChains * kPeakIters * kPeakThreads * blocks;
  *out_flops_per_s = seconds > 0 ? flops / seconds : 0.0;
  return cudaSuccess;
}
