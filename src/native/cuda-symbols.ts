// bun:ffi symbol table for cuda/cuda_api.h: the CUDA library's devices, streams, events, graphs and
// on-the-spot peaks (exported by libgpt2_cuda.so, and by libgpt2_emu.so running on the CPU).
// Every i32 return is a cudaError_t (0 = success); a null handle means failure (be_last_error says why).
import { FFIType } from "bun:ffi";

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
  cu_graph_capture: { args: [ptr], returns: ptr },
  cu_graph_launch: { args: [ptr, i32], returns: i32 },
  cu_graph_kernel_nodes: { args: [ptr], returns: i32 },
  cu_graph_destroy: { args: [ptr], returns: i32 },
  cu_plan_run_n: { args: [ptr, i32], returns: i32 },
  cu_measure_copy_bandwidth: { args: [u64, i32, ptr], returns: i32 },
  cu_measure_fp32_peak: { args: [ptr], returns: i32 },
  cu_measure_launch: { args: [i32, ptr], returns: i32 },
} as const satisfies Record<string, { args: readonly FFIType[]; returns: FFIType }>;

/** CuDeviceInfo (cuda/cuda_api.h): byte offsets of its fields in the 304-byte struct. */
export const CU_DEVICE_INFO = {
  bytes: 304,
  name: 0,
  nameBytes: 256,
  ccMajor: 256,
  ccMinor: 260,
  smCount: 264,
  smClockKhz: 268,
  totalMemBytes: 272, // u64
  memClockKhz: 280,
  memBusWidthBits: 284,
  l2Bytes: 288,
  maxSmemPerBlockOptin: 292,
  driverVersion: 296,
  runtimeVersion: 300,
} as const;

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
  const o = CU_DEVICE_INFO;
  const view = new DataView(bytes.buffer, bytes.byteOffset, o.bytes);
  const nameBytes = bytes.subarray(o.name, o.name + o.nameBytes);
  const end = nameBytes.indexOf(0);
  const i32 = (offset: number) => view.getInt32(offset, true);
  return {
    name: new TextDecoder().decode(nameBytes.subarray(0, end < 0 ? o.nameBytes : end)),
    ccMajor: i32(o.ccMajor),
    ccMinor: i32(o.ccMinor),
    smCount: i32(o.smCount),
    smClockKhz: i32(o.smClockKhz),
    totalMemBytes: Number(view.getBigUint64(o.totalMemBytes, true)),
    memClockKhz: i32(o.memClockKhz),
    memBusWidthBits: i32(o.memBusWidthBits),
    l2Bytes: i32(o.l2Bytes),
    maxSmemPerBlockOptin: i32(o.maxSmemPerBlockOptin),
    driverVersion: i32(o.driverVersion),
    runtimeVersion: i32(o.runtimeVersion),
  };
}
