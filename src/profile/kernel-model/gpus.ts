// The GPUs the kernel model predicts for: each one's shape (SMs, threads, blocks and registers per SM) and its
// parameters, each a working value with the range it may fall in and its source. They are leads, not measurements
// of this code: the first GPU run calibrates them (src/profile/kernel-model/model.ts says how each is used).

/** A parameter's working value, its plausible range, and where it comes from. */
export interface Estimate {
  value: number;
  low: number;
  high: number;
  source: string;
}

export interface GpuModel {
  name: string;
  sms: number;
  maxThreadsPerSm: number;
  maxBlocksPerSm: number;
  registersPerSm: number;
  /** the most registers a thread may have, and the unit a thread's registers are allocated in */
  maxRegistersPerThread: number;
  registerUnit: number;
  /** streaming reads from device memory, bytes/s */
  bandwidth: Estimate;
  /** fp32 FMA throughput, FLOP/s */
  flops: Estimate;
  /** a device-memory round trip under load, µs */
  dramLatencyUs: Estimate;
  /** an L2 hit round trip, µs */
  l2LatencyUs: Estimate;
  /** host time to issue one launch from TypeScript through bun:ffi, and from C++ */
  eagerHostUs: Estimate;
  nativeHostUs: Estimate;
  /** the device's gap between two dependent kernels: back to back in a stream or in a graph */
  graphNodeUs: Estimate;
  /** the same with programmatic dependent launch; null where the GPU has none (before sm_90) */
  pdlNodeUs: Estimate | null;
  /** the persistent step's grid barrier between two ops: the last arrival seen by every waiting block */
  gridBarrierUs: Estimate;
}

const GRID_BARRIER =
  "estimate: the last block's release (MEMBAR.ALL.GPU: its stores acknowledged, an L2 round trip) and its atomic at L2, then a poller's acquire load seeing it, up to a 128 ns sleep late: 3 L2 round trips and half a sleep, ~0.5-0.8 µs; up to 2 µs with 264 pollers on one line (a review's figure for the sequentially consistent design it replaced: 1-2 µs); measured by `profile` on the device (1000 barriers in one cooperative launch, every block at once and with skewed arrivals, beside the sequentially consistent design), and calibrated by the first GPU run's persistent steps";

const LAUNCH_FLOOR = "calibrated by the launch floor `profile` measures on the device (empty kernels)";

/** The two GPUs of the study: the H200 lent here, and the A40 of the seed's experiment. */
export const GPU_MODELS = {
  h200: {
    name: "NVIDIA H200 (SXM)",
    sms: 132,
    maxThreadsPerSm: 2048,
    maxBlocksPerSm: 32,
    registersPerSm: 65536,
    maxRegistersPerThread: 255,
    registerUnit: 8,
    bandwidth: {
      value: 4.3e12,
      low: 4.0e12,
      high: 4.8e12,
      source:
        "device-to-device copy measured at ~4.3 TB/s on this workplace's H200 (KINDS.md, 2026-10-28 and 11-04); 4.8 TB/s datasheet",
    },
    flops: { value: 67e12, low: 50e12, high: 67e12, source: "datasheet fp32 (H200.md)" },
    dramLatencyUs: {
      value: 0.5,
      low: 0.3,
      high: 0.7,
      source:
        "lead: HBM round trips of several hundred ns unloaded in published Hopper microbenchmarks, more under load (issue 9: 0.3-0.6 µs)",
    },
    l2LatencyUs: {
      value: 0.15,
      low: 0.1,
      high: 0.3,
      source: "lead: ~200-300 cycles at 1.5-2 GHz in published Hopper figures",
    },
    eagerHostUs: {
      value: 4,
      low: 2.5,
      high: 6,
      source: `lead: cudaLaunchKernel ~2-3 µs plus one bun:ffi call (an empty CPU op costs 0.02-0.07 µs through bun:ffi on the dev VM, profiles/2026-11-30-cpu-*; issuing a 62-op eager step from TypeScript took 0.16-0.87 ms there); ${LAUNCH_FLOOR}`,
    },
    nativeHostUs: { value: 2.5, low: 1.5, high: 4, source: `lead: cudaLaunchKernel from C++; ${LAUNCH_FLOOR}` },
    graphNodeUs: {
      value: 1.0,
      low: 0.6,
      high: 2.0,
      source: `lead: ~1 µs between dependent kernel nodes; ${LAUNCH_FLOOR}`,
    },
    pdlNodeUs: {
      value: 0.4,
      low: 0.2,
      high: 0.8,
      source:
        "guess: the dependent grid is already resident and waiting; what remains is the predecessor's completion reaching it",
    },
    gridBarrierUs: { value: 0.7, low: 0.4, high: 2.0, source: GRID_BARRIER },
  },
  a40: {
    name: "NVIDIA A40",
    sms: 84,
    maxThreadsPerSm: 1536,
    maxBlocksPerSm: 16,
    registersPerSm: 65536,
    maxRegistersPerThread: 255,
    registerUnit: 8,
    bandwidth: {
      value: 0.6e12,
      low: 0.55e12,
      high: 0.696e12,
      source: "datasheet 696 GB/s (GDDR6, 384-bit); streaming reads typically reach ~85-90% of it",
    },
    flops: { value: 37.4e12, low: 30e12, high: 37.4e12, source: "datasheet fp32" },
    dramLatencyUs: {
      value: 0.6,
      low: 0.4,
      high: 0.8,
      source: "lead: GDDR6 round trips are somewhat longer than HBM's",
    },
    l2LatencyUs: { value: 0.2, low: 0.15, high: 0.3, source: "lead: Ampere L2 hits of ~200-300 cycles at ~1.7 GHz" },
    eagerHostUs: { value: 4, low: 2.5, high: 6, source: `as for the H200 (a host cost); ${LAUNCH_FLOOR}` },
    nativeHostUs: { value: 2.5, low: 1.5, high: 4, source: `as for the H200; ${LAUNCH_FLOOR}` },
    graphNodeUs: { value: 1.2, low: 0.8, high: 2.0, source: `lead; ${LAUNCH_FLOOR}` },
    pdlNodeUs: null,
    gridBarrierUs: { value: 0.9, low: 0.5, high: 2.4, source: GRID_BARRIER },
  },
} as const satisfies Record<string, GpuModel>;
export type GpuName = keyof typeof GPU_MODELS;

/** The GPU whose machine code the library holds (src/native/build.ts builds sm_90): its register file bounds a kernel's registers. */
export const SASS_GPU: GpuModel = GPU_MODELS.h200;

/** Registers per thread a kernel compiled for `blocks` resident blocks of `threads` per SM may use (its __launch_bounds__). */
export function registerBudget(gpu: GpuModel, threads: number, blocks: number): number {
  const share = Math.floor(gpu.registersPerSm / (blocks * threads) / gpu.registerUnit) * gpu.registerUnit;
  return Math.min(gpu.maxRegistersPerThread, share);
}

/** The model's GPU for a device name ("NVIDIA H200" → h200), or null where the model has none. */
export function gpuModelFor(deviceName: string): GpuName | null {
  if (/H200/i.test(deviceName)) return "h200";
  if (/\bA40\b/i.test(deviceName)) return "a40";
  return null;
}

/** The GPU with every estimate at the end of its range that makes a step faster, or slower. */
export function gpuAt(gpu: GpuModel, end: "optimistic" | "pessimistic"): GpuModel {
  const fast = end === "optimistic";
  const pick = (e: Estimate, higherIsFaster: boolean): Estimate => ({
    ...e,
    value: fast === higherIsFaster ? e.high : e.low,
  });
  return {
    ...gpu,
    bandwidth: pick(gpu.bandwidth, true),
    flops: pick(gpu.flops, true),
    dramLatencyUs: pick(gpu.dramLatencyUs, false),
    l2LatencyUs: pick(gpu.l2LatencyUs, false),
    eagerHostUs: pick(gpu.eagerHostUs, false),
    nativeHostUs: pick(gpu.nativeHostUs, false),
    graphNodeUs: pick(gpu.graphNodeUs, false),
    pdlNodeUs: gpu.pdlNodeUs && pick(gpu.pdlNodeUs, false),
    gridBarrierUs: pick(gpu.gridBarrierUs, false),
  };
}
