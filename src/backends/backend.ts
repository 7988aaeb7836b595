// One interface for every backend: the CPU library, the CUDA library, and the CUDA sources emulated on the CPU.
import type { LaunchMode } from "../profile/types.ts";
import type { EncodedPlan } from "../plan.ts";

export type BackendKind = "cpu" | "cuda" | "emu";

/** Memory owned by a backend: device memory for CUDA, host memory for the CPU. */
export interface DeviceBuffer {
  readonly ptr: number;
  readonly bytes: number;
}

/** A decode step recorded once: every launch mode the backend supports runs the same ops. */
export interface RecordedStep {
  readonly ops: number;
  /** one native call runs `n` steps back to back (C++ loop over the op table) */
  runNative(n?: number): void;
  /** CUDA graph replay, `n` back to back with no host sync; undefined where graphs don't exist */
  readonly runGraph?: (n?: number) => void;
  /** kernel nodes in the captured graph (CUDA; captures it if needed) */
  readonly graphKernelNodes?: () => number;
  destroy(): void;
}

export interface MemoryInfo {
  free: number;
  total: number;
}

export interface Backend {
  readonly kind: BackendKind;
  /** device name for reports, e.g. "NVIDIA H200" or the CPU model */
  readonly deviceName: string;
  readonly modes: readonly LaunchMode[];
  /** bun:ffi symbols for the op_* functions (one FFI call each = one kernel launch on CUDA) */
  readonly ops: OpSymbols;

  alloc(bytes: number): DeviceBuffer;
  free(buffer: DeviceBuffer): void;
  upload(dst: DeviceBuffer, src: ArrayBufferView, dstOffsetBytes?: number): void;
  download(src: DeviceBuffer, dst: ArrayBufferView, srcOffsetBytes?: number): void;
  /** fills `count` 32-bit words (poisoning, zeroing) */
  fill32(dst: DeviceBuffer, word: number, count?: number): void;
  synchronize(): void;
  memInfo(): MemoryInfo;
  attentionScratchBytes(T: number, C: number, nHead: number, maxCtx: number): number;
  record(plan: EncodedPlan): RecordedStep;
  close(): void;
}

/** The op_* functions as bun:ffi exposes them: pointers and ints as numbers. */
export interface OpSymbols {
  op_embed(out: number, seq: number, state: number, wte: number, wpe: number, T: number, C: number): void;
  op_layernorm(out: number, inp: number, weight: number, bias: number, T: number, C: number, eps: number): void;
  op_linear(out: number, inp: number, weight: number, bias: number, T: number, C: number, OC: number): void;
  op_kv_append(kCache: number, vCache: number, qkv: number, state: number, T: number, C: number, maxCtx: number): void;
  op_attention(out: number, scratch: number, qkv: number, kCache: number, vCache: number, state: number, T: number, C: number, nHead: number, maxCtx: number): void;
  op_gelu(out: number, inp: number, N: number): void;
  op_residual(out: number, a: number, b: number, N: number): void;
  op_lm_head(logits: number, inp: number, wte: number, T: number, C: number, V: number): void;
  op_argmax(seq: number, state: number, logits: number, V: number, T: number, maxCtx: number): void;
}
