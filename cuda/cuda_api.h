// The CUDA library's own C ABI, beside ops.h, plan.h and runtime.h: devices, streams, events, graphs,
// eager replay and on-the-spot peak measurements. Exported by libgpt2_cuda.so (and, running on the CPU,
// libgpt2_emu.so). Every int return is a cudaError_t code (0 = success); nothing aborts or prints.
// Handles are opaque pointers; a NULL handle return means failure, with the code in be_last_error().
#pragma once
#include <stdint.h>

#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

// Device description, naturally aligned with no padding, read field by field from TypeScript at the offsets
// of CU_DEVICE_INFO (src/native/cuda-symbols.ts; test/abi-layout.test.ts checks them against offsetof).
typedef struct CuDeviceInfo {
  char name[256];    // NUL-terminated
  int32_t cc_major;  // compute capability
  int32_t cc_minor;
  int32_t sm_count;      // multiprocessors
  int32_t sm_clock_khz;  // peak SM clock
  uint64_t total_mem_bytes;
  int32_t mem_clock_khz;  // peak memory clock
  int32_t mem_bus_width_bits;
  int32_t l2_bytes;
  int32_t max_smem_per_block_optin;  // bytes
  int32_t driver_version;            // e.g. 13000 = 13.0
  int32_t runtime_version;
} CuDeviceInfo;

int cu_device_count(int* out);
int cu_device_info(int device, CuDeviceInfo* out);

// Streams. Every op_* launches on the current stream; cu_set_stream(NULL) selects the library's own
// non-blocking stream (created by be_init), never the legacy default stream, which cannot be captured.
void* cu_stream_create(void);
int cu_stream_destroy(void* stream);  // the current stream falls back to the library's own
int cu_set_stream(void* stream);
int cu_sync_stream(void);  // waits for the current stream

// Events, recorded on the current stream.
void* cu_event_create(void);
int cu_event_record(void* event);
int cu_event_synchronize(void* event);
int cu_event_elapsed_ms(void* start, void* end, float* out);
int cu_event_destroy(void* event);

// Graphs: plan_run captured on the current stream and instantiated. The handle keeps both the graph
// and its executable form. kind:
//   CU_CAPTURE_PLAIN         one kernel node per launch (graph)
//   CU_CAPTURE_PROGRAMMATIC  every kernel launched with programmatic stream serialization (graph-pdl), so a kernel
//                            may start while its predecessor runs and waits for it in-kernel (cuda/launch.h); the
//                            emulator runs it in order
//   CU_CAPTURE_PERSISTENT    one node: the persistent step kernel running the plan's ops as tasks (cuda/persistent.cu);
//                            cudaErrorNotSupported for a plan it cannot run (an unfused op, a prefill, a scalar
//                            variant, a cache in another storage type than the weights)
enum { CU_CAPTURE_PLAIN = 0, CU_CAPTURE_PROGRAMMATIC = 1, CU_CAPTURE_PERSISTENT = 2 };
void* cu_graph_capture(const Plan* plan, int kind);
int cu_graph_launch(void* graph, int n);  // n back-to-back replays on the current stream, no host sync
// The grid and block of every kernel the plan launches, in order, read by capturing the plan without running
// it (its pointers are never dereferenced). Writes at most max shapes; returns the number of launches, or -error.
typedef struct CuLaunchShape {
  int32_t grid[3];
  int32_t block[3];
} CuLaunchShape;
int cu_plan_launch_shapes(const Plan* plan, CuLaunchShape* out, int max);
int cu_graph_kernel_nodes(void* graph);  // kernel nodes in the captured graph (negative: -error)
int cu_graph_destroy(void* graph);

// Eager-native: n plan_run calls, every kernel launched from C++, no host sync.
int cu_plan_run_n(const Plan* plan, int n);

// Ceilings measured on the spot: device-to-device copy bandwidth counting bytes read + written, and
// fp32 FMA throughput (2 flops per FMA).
int cu_measure_copy_bandwidth(uint64_t bytes, int iters, double* out_bytes_per_s);
int cu_measure_fp32_peak(double* out_flops_per_s);

// The launch floor, from n empty kernels: out[0] host µs per eager launch call, out[1] device µs per kernel
// launched back to back from a full queue (behind a spin kernel), out[2] device µs per kernel node of a graph replay,
// out[3] per node of a graph captured with programmatic dependent launch (each kernel lets its successor start and
// waits for its predecessor).
int cu_measure_launch(int n, double* out);
// The persistent step's grid barrier, n in a row in one cooperative launch on the fp32 single-sequence step's
// resident blocks: out[0] device µs per barrier, out[1] the blocks, out[2] µs per barrier with skewed arrivals
// (beyond the last arrival), out[3] and out[4] the sequentially consistent design without and with skew.
int cu_measure_grid_barrier(int n, double* out);

#ifdef __cplusplus
}
#endif
