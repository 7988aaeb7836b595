// One interface for every backend: the CPU library, the CUDA library, and the CUDA sources emulated on the CPU.
// A backend describes itself — its device, what it can do, how it is measured, its study defaults — so
// that nothing above it branches on which backend it is.
import type { StoredWords } from "../model/dtypes.ts";
import type { KernelFacts, PersistentStepBuild } from "../native/kernel-facts.ts";
import type { OpSymbols } from "../ops.ts";
import type { EncodedPlan } from "../plan.ts";
import type { Instrument } from "./instrument.ts";

export type BackendKind = "cpu" | "cuda" | "emu";

/** How a buffer is written: whole before it is read (the weights), or in part (the cache, activations). */
export type Written = "whole" | "in part";

/** Memory owned by a backend: device memory for CUDA, host memory for the CPU. */
export interface DeviceBuffer {
  readonly ptr: number;
  readonly bytes: number;
}

/**
 * Elements [first, first + data.length) of a row-major (rows, cols) matrix: a linear layer's weight as the
 * checkpoints and the GPU kernels hold it, input-first (rows = in, cols = out), in its storage type's words.
 */
export interface MatrixElements {
  data: StoredWords;
  rows: number;
  cols: number;
  first: number;
}

/** The captures of a step (cuda/cuda_api.h CU_CAPTURE_*). */
export type GraphCapture = "plain" | "programmatic" | "persistent";

/** A decode step recorded once: every launch mode the backend supports runs the same ops. */
export interface RecordedStep {
  readonly ops: number;
  /** one native call runs `n` steps back to back (C++ loop over the op table) */
  runNative(n?: number): void;
  /** CUDA graph replay, `n` back to back with no host sync; undefined where graphs don't exist */
  readonly runGraph?: (n?: number) => void;
  /** the graph captured with programmatic dependent launch, replayed `n` times; undefined without such launches */
  readonly runGraphPdl?: (n?: number) => void;
  /** the fused step as one cooperative kernel (cuda/persistent.cu) in a one-node graph, replayed `n` times */
  readonly runPersistent?: (n?: number) => void;
  /** kernel nodes in the captured graph (CUDA; captures it if needed): plain, graph-pdl's or the persistent step's */
  readonly graphKernelNodes?: (capture?: GraphCapture) => number;
  destroy(): void;
}

/** A kernel launch's grid and block. */
export interface LaunchShape {
  grid: [number, number, number];
  block: [number, number, number];
}

/**
 * A backend whose ops are GPU kernels: each op's launch shapes (captured from the launchers, not run; most ops one,
 * the LM head one per group of rows its shared memory holds), the library holding them, and the kernels' facts it
 * exports (their geometry and dependent chains).
 */
export interface KernelLaunches {
  launchShapes(plan: EncodedPlan): LaunchShape[][];
  readonly libraryPath: string;
  readonly facts: KernelFacts;
}

export interface MemoryInfo {
  free: number;
  total: number;
}

/** The device as reports name it. */
export interface BackendDescription {
  backend: "cpu" | "cuda";
  name: string;
  detail: Record<string, string | number>;
}

/** How long a study on this backend should run by default (a GPU step takes microseconds, a CPU one milliseconds). */
export interface StudyDefaults {
  contexts: readonly number[];
  /** contexts a long-context model adds to the sweep: those its positions hold (the rest dropped, not capped) */
  longContexts: readonly number[];
  repeats: number;
  warmup: number;
  /** tokens generated end to end */
  e2eTokens: number;
}

/**
 * The contexts a study of a model with `nPositions` positions sweeps by default: the defaults capped at its last
 * context (a step at context c writes position c), and the long contexts its positions hold (8192 of 8192: 8191).
 */
export function defaultSweep(d: StudyDefaults, nPositions: number): number[] {
  const last = nPositions - 1;
  const long = d.longContexts.filter((c) => c <= nPositions);
  return [...new Set([...d.contexts, ...long].map((c) => Math.min(c, last)))].sort((a, b) => a - b);
}

/** Backends whose steps run on the host CPU: a shorter sweep, so a default run ends in minutes on 2 cores (the uncached step grows with context). */
export const HOST_STUDY_DEFAULTS: StudyDefaults = {
  contexts: [8, 10, 16, 32, 64, 100, 128],
  longContexts: [2048, 4096, 8192], // Llama-3.2-1B f32 at 8191: 117 ms a step (AMD EPYC VM, 2026-12-04); --fill auto
  repeats: 10,
  warmup: 2,
  e2eTokens: 56,
};

export interface Backend {
  readonly kind: BackendKind;
  /** device name for reports, e.g. "NVIDIA H200" or the CPU model */
  readonly deviceName: string;
  /** whether a recorded step can be captured and replayed as a CUDA graph */
  readonly graphs: boolean;
  /** whether kernels can be launched with programmatic dependent launch (a GPU of compute capability 9.0 or later, or the emulator) */
  readonly programmaticLaunch: boolean;
  /** what the persistent cooperative step kernel runs (RecordedStep.runPersistent), null where there is none */
  readonly persistentStep: PersistentStepBuild | null;
  /** whether issuing a step returns before the device runs it (CUDA): host issue time is the launch path alone */
  readonly issueIsAsync: boolean;
  /** what memInfo's free bytes are, in words */
  readonly memInfoSource: string;
  readonly studyDefaults: StudyDefaults;
  /** GPU kernels' launch shapes and library (what the kernel model predicts from); undefined on the CPU */
  readonly kernels?: KernelLaunches;
  /** bun:ffi symbols for the op_* functions (one FFI call each = one kernel launch on CUDA) */
  readonly ops: OpSymbols;

  describe(): BackendDescription;
  /** the backend's timers and tracer */
  instrument(): Instrument;
  /** zeroed (cuda/runtime.h); "whole": written whole before it is read, as the weights are (huge pages on the CPU) */
  alloc(bytes: number, written?: Written): DeviceBuffer;
  free(buffer: DeviceBuffer): void;
  upload(dst: DeviceBuffer, src: ArrayBufferView, dstOffsetBytes?: number): void;
  /**
   * Part of a linear layer's weight matrix (whose first element is at dstOffsetBytes) into the backend's own
   * layout of it (cuda/runtime.h be_upload_matrix): as given on a GPU, out-major on the CPU.
   */
  uploadMatrix(dst: DeviceBuffer, src: MatrixElements, dstOffsetBytes?: number): void;
  download(src: DeviceBuffer, dst: ArrayBufferView, srcOffsetBytes?: number): void;
  /** fills `count` 32-bit words (poisoning, zeroing) */
  fill32(dst: DeviceBuffer, word: number, count?: number): void;
  synchronize(): void;
  memInfo(): MemoryInfo;
  /** how much of `bytes` at `ptr` (inside one allocation) is held in memory now: resident pages on the host */
  residentBytes(ptr: number, bytes: number): number;
  /** what residentBytes counts, in words */
  readonly residentSource: string;
  attentionScratchBytes(rows: number, C: number, nHead: number, nKv: number, maxCtx: number): number;
  /** bytes of the partials buffer of the ops that merge across blocks (cuda/ops.h op_partials_bytes) */
  partialsBytes(maxRows: number, maxIn: number, maxOut: number, V: number): number;
  record(plan: EncodedPlan): RecordedStep;
  close(): void;
}
