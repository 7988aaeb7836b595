// bun:ffi symbol tables for the native libraries (cuda/ops.h, cuda/plan.h, cuda/runtime.h, cuda/cuda_api.h).
// Device and host pointers are declared "ptr" and held as plain numbers (see conventions/bun-ffi.md).
import { FFIType, type FFIFunction } from "bun:ffi";

import { cFunction, OP_FAMILIES, OPS, type CType, type OpFamily, type Param } from "../ops.ts";

const { ptr, i32, u32, f32, f64, u64, cstring, void: v } = FFIType;

/** A C parameter type as bun:ffi declares it: pointers as `ptr`, held as plain numbers. */
const FFI_TYPE = {
  "float*": ptr,
  "const float*": ptr,
  "int*": ptr,
  "const int*": ptr,
  "void*": ptr,
  "const void*": ptr,
  int: i32,
  float: f32,
} as const satisfies Record<CType, FFIType>;
type FfiArgs<P extends readonly Param[]> = { readonly [I in keyof P]: (typeof FFI_TYPE)[P[I][1]] };
type OpFfi = {
  [F in OpFamily as `op_${F}`]: { readonly args: FfiArgs<(typeof OPS)[F]["params"]>; readonly returns: FFIType.void };
};

/** The decode step's operations (from the op table, src/ops.ts), identical in every backend library, and their scratch sizes. */
export const OP_SYMBOLS = {
  ...(Object.fromEntries(
    OP_FAMILIES.map((f) => [cFunction(f), { args: OPS[f].params.map(([, type]) => FFI_TYPE[type]), returns: v }]),
  ) as unknown as OpFfi),
  op_attention_scratch_bytes: { args: [i32, i32, i32, i32, i32], returns: u64 },
  op_partials_bytes: { args: [i32, i32, i32, i32], returns: u64 },
} as const satisfies Record<string, FFIFunction>;

/** Recorded plans (cuda/plan.h). */
export const PLAN_SYMBOLS = {
  plan_create: { args: [ptr, i32], returns: ptr },
  plan_destroy: { args: [ptr], returns: v },
  plan_ops: { args: [ptr], returns: i32 },
  plan_run: { args: [ptr], returns: i32 },
} as const;

/** Memory, synchronisation and errors (cuda/runtime.h). */
export const RUNTIME_SYMBOLS = {
  be_init: { args: [i32], returns: i32 },
  be_last_error: { args: [], returns: i32 },
  be_error_name: { args: [i32], returns: cstring },
  be_error_string: { args: [i32], returns: cstring },
  be_alloc: { args: [u64], returns: ptr },
  be_alloc_whole: { args: [u64], returns: ptr },
  be_free: { args: [ptr], returns: i32 },
  be_upload: { args: [ptr, ptr, u64], returns: i32 },
  be_upload_matrix: { args: [ptr, ptr, u64, u64, i32, i32, i32], returns: i32 },
  be_download: { args: [ptr, ptr, u64], returns: i32 },
  be_copy: { args: [ptr, ptr, u64], returns: i32 },
  be_fill_u32: { args: [ptr, u32, u64], returns: i32 },
  be_synchronize: { args: [], returns: i32 },
  be_mem_info: { args: [ptr], returns: i32 },
} as const;

/** CPU library only: per-op timers and thread count (cuda/cpu_runtime.cpp). */
export const CPU_SYMBOLS = {
  cpu_now_ns: { args: [], returns: FFIType.i64_fast },
  cpu_threads: { args: [], returns: i32 },
  cpu_resident_bytes: { args: [], returns: u64 },
  cpu_resident_range_bytes: { args: [ptr, u64], returns: u64 },
  cpu_set_threads: { args: [i32], returns: v },
  cpu_read_prepare: { args: [ptr, u64], returns: i32 },
  cpu_read_pass: { args: [ptr, u64], returns: f64 },
  cpu_measure_fp32_peak: { args: [i32], returns: f64 },
  cpu_pool_check: { args: [i32], returns: i32 },
  prof_enable: { args: [i32], returns: v },
  prof_reset: { args: [], returns: v },
  prof_count: { args: [], returns: i32 },
  prof_dropped: { args: [], returns: i32 },
  prof_read: { args: [ptr, i32], returns: i32 },
} as const;
