// bun:ffi symbol tables for the native libraries (cuda/ops.h, cuda/plan.h, cuda/runtime.h, cuda/cuda_api.h).
// Device and host pointers are declared "ptr" and held as plain numbers (see conventions/bun-ffi.md).
import { FFIType } from "bun:ffi";

const { ptr, i32, u32, f32, f64, u64, cstring, void: v } = FFIType;

/** The decode step's operations, identical in every backend library. */
export const OP_SYMBOLS = {
  op_embed: { args: [ptr, ptr, ptr, ptr, ptr, i32, i32], returns: v },
  op_layernorm: { args: [ptr, ptr, ptr, ptr, i32, i32, f32], returns: v },
  op_linear: { args: [ptr, ptr, ptr, ptr, i32, i32, i32], returns: v },
  op_kv_append: { args: [ptr, ptr, ptr, ptr, i32, i32, i32], returns: v },
  op_attention: { args: [ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, i32], returns: v },
  op_attention_scratch_bytes: { args: [i32, i32, i32, i32], returns: u64 },
  op_gelu: { args: [ptr, ptr, i32], returns: v },
  op_residual: { args: [ptr, ptr, ptr, i32], returns: v },
  op_lm_head: { args: [ptr, ptr, ptr, i32, i32, i32], returns: v },
  op_argmax: { args: [ptr, ptr, ptr, i32, i32, i32], returns: v },
} as const;

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
  be_free: { args: [ptr], returns: i32 },
  be_upload: { args: [ptr, ptr, u64], returns: i32 },
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
  cpu_set_threads: { args: [i32], returns: v },
  cpu_measure_read_bandwidth: { args: [u64, i32], returns: f64 },
  cpu_measure_fp32_peak: { args: [i32], returns: f64 },
  cpu_pool_check: { args: [i32], returns: i32 },
  prof_enable: { args: [i32], returns: v },
  prof_reset: { args: [], returns: v },
  prof_count: { args: [], returns: i32 },
  prof_dropped: { args: [], returns: i32 },
  prof_read: { args: [ptr, i32], returns: i32 },
} as const;
