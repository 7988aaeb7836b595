// bun:ffi symbol table for cuda/cuda_api.h: the CUDA library's devices, streams, events, graphs and
// on-the-spot peaks (exported by libgpt2_cuda.so, and by libgpt2_emu.so running on the CPU).
// Every i32 return is a cudaError_t (0 = success); a null handle means failure (be_last_error says why).
import { FFIType } from "bun:ffi";

import { KERNEL_FACTS_SYMBOL } from "./kernel-facts.ts";
import { cString, fieldBytes, type StructLayout } from "./struct-layout.ts";

const { ptr, i32, u64 } = FFIType;

export const CUDA_SYMBOLS = {
  cu_device_count: { args: [ptr], returns: i32 },
  cu_device_info: { args: [i32, ptr], returns: i32 },
  cu_stream_create: { args: [], returns: ptr },
  cu_stream_destroy: { args: [ptr], returns: i32 },
  cu_set_stream: { args: [ptr], returns: i32 },
  cu_sync_stream: { args: [], returns: i32 },
  cu_event_create: { args: [], returns: ptr },
  cu_event_record: { args: [ptr], returns: i32 },
  cu_event_synchronize: { args: [ptr], returns: i32 },
  cu_event_elapsed_ms: { args: [ptr, ptr, ptr], returns: i32 },
  cu_event_destroy: { args: [ptr], returns: i32 },
  cu_graph_capture: { args: [ptr, i32], returns: ptr },
  cu_plan_launch_shapes: { args: [ptr, ptr, i32], returns: i32 },
  cu_graph_launch: { args: [ptr, i32], returns: i32 },
  cu_graph_kernel_nodes: { args: [ptr], returns: i32 },
  cu_graph_destroy: { args: [ptr], returns: i32 },
  cu_plan_run_n: { args: [ptr, i32], returns: i32 },
  cu_measure_copy_bandwidth: { args: [u64, i32, ptr], returns: i32 },
  cu_measure_fp32_peak: { args: [ptr], returns: i32 },
  cu_measure_launch: { args: [i32, ptr], returns: i32 },
  cu_measure_grid_barrier: { args: [i32, ptr], returns: i32 },
  ...KERNEL_FACTS_SYMBOL,
} as const satisfies Record<string, { args: readonly FFIType[]; returns: FFIType }>;

/** CuDeviceInfo (cuda/cuda_api.h): its size and the byte offsets of its fields. */
/** cuda_api.h CuLaunchShape: a kernel launch's grid and block, int32 each. */
export const CU_LAUNCH_SHAPE: StructLayout<"grid" | "block"> = {
  struct: "CuLaunchShape",
  header: "cuda_api.h",
  bytes: 24,
  fields: { grid: 0, block: 12 },
};

export const CU_DEVICE_INFO: StructLayout<
  | "name"
  | "cc_major"
  | "cc_minor"
  | "sm_count"
  | "sm_clock_khz"
  | "total_mem_bytes"
  | "mem_clock_khz"
  | "mem_bus_width_bits"
  | "l2_bytes"
  | "max_smem_per_block_optin"
  | "driver_version"
  | "runtime_version"
> = {
  struct: "CuDeviceInfo",
  header: "cuda_api.h",
  bytes: 304,
  fields: {
    name: 0,
    cc_major: 256,
    cc_minor: 260,
    sm_count: 264,
    sm_clock_khz: 268,
    total_mem_bytes: 272,
    mem_clock_khz: 280,
    mem_bus_width_bits: 284,
    l2_bytes: 288,
    max_smem_per_block_optin: 292,
    driver_version: 296,
    runtime_version: 300,
  },
};

export interface CuDeviceInfo {
  name: string;
  ccMajor: number;
  ccMinor: number;
  smCount: number;
  smClockKhz: number;
  totalMemBytes: number;
  memClockKhz: number;
  memBusWidthBits: number;
  l2Bytes: number;
  maxSmemPerBlockOptin: number;
  driverVersion: number;
  runtimeVersion: number;
}

/** Decodes the bytes cu_device_info filled. */
export function decodeDeviceInfo(bytes: Uint8Array): CuDeviceInfo {
  const { fields: f, bytes: size } = CU_DEVICE_INFO;
  const view = new DataView(bytes.buffer, bytes.byteOffset, size);
  const i32 = (offset: number) => view.getInt32(offset, true);
  return {
    name: cString(bytes, f.name, fieldBytes(CU_DEVICE_INFO, "name")),
    ccMajor: i32(f.cc_major),
    ccMinor: i32(f.cc_minor),
    smCount: i32(f.sm_count),
    smClockKhz: i32(f.sm_clock_khz),
    totalMemBytes: Number(view.getBigUint64(f.total_mem_bytes, true)),
    memClockKhz: i32(f.mem_clock_khz),
    memBusWidthBits: i32(f.mem_bus_width_bits),
    l2Bytes: i32(f.l2_bytes),
    maxSmemPerBlockOptin: i32(f.max_smem_per_block_optin),
    driverVersion: i32(f.driver_version),
    runtimeVersion: i32(f.runtime_version),
  };
}
