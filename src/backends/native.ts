// The part every native backend shares: a library exporting ops.h, plan.h and runtime.h, loaded with bun:ffi.
import { dlopen, type FFIFunction } from "bun:ffi";

import { UserError } from "../errors.ts";
import { OP_SYMBOLS, PLAN_SYMBOLS, RUNTIME_SYMBOLS } from "../native/symbols.ts";
import type { PersistentStepBuild } from "../native/kernel-facts.ts";
import type { OpSymbols } from "../ops.ts";
import type { EncodedPlan } from "../plan.ts";
import type {
  Backend,
  BackendDescription,
  BackendKind,
  DeviceBuffer,
  MatrixElements,
  MemoryInfo,
  RecordedStep,
  StudyDefaults,
  Written,
} from "./backend.ts";
import type { Instrument } from "./instrument.ts";

const BASE_SYMBOLS = { ...OP_SYMBOLS, ...PLAN_SYMBOLS, ...RUNTIME_SYMBOLS };
/** cudaErrorMemoryAllocation (and the CPU library's code for the same): a NULL allocation that left no error */
const ERROR_MEMORY_ALLOCATION = 2;

/**
 * plan.h and runtime.h as called from TypeScript. bun:ffi brands pointers as `Pointer`; device pointers
 * here are plain numbers (never dereferenced by JS), so the symbol tables are typed by hand.
 */
export interface BaseSymbols {
  plan_create(records: BigInt64Array, nOps: number): number | null;
  plan_destroy(plan: number): void;
  plan_ops(plan: number): number;
  plan_run(plan: number): number;
  be_init(device: number): number;
  be_last_error(): number;
  be_error_name(code: number): { toString(): string };
  be_error_string(code: number): { toString(): string };
  be_alloc(bytes: number): number | null;
  be_alloc_whole(bytes: number): number | null;
  be_free(ptr: number): number;
  be_upload(dst: number, src: ArrayBufferView, bytes: number): number;
  be_upload_matrix(
    dst: number,
    src: ArrayBufferView,
    first: number,
    count: number,
    rows: number,
    cols: number,
    elementBytes: number,
  ): number;
  be_download(dst: ArrayBufferView, src: number, bytes: number): number;
  be_copy(dst: number, src: number, bytes: number): number;
  be_fill_u32(dst: number, word: number, count: number): number;
  be_synchronize(): number;
  be_mem_info(out: BigUint64Array): number;
  op_attention_scratch_bytes(rows: number, C: number, nHead: number, nKv: number, maxCtx: number): number | bigint;
  op_partials_bytes(maxRows: number, maxIn: number, maxOut: number, V: number): number | bigint;
}

/** Opens a backend library, turning a missing or broken file into one clear line. `S` types the extra symbols. */
export function openLibrary<S>(
  path: string,
  extra: Record<string, FFIFunction>,
): { symbols: BaseSymbols & OpSymbols & S; close(): void } {
  try {
    const lib = dlopen(path, { ...BASE_SYMBOLS, ...extra });
    return { symbols: lib.symbols as unknown as BaseSymbols & OpSymbols & S, close: () => lib.close() };
  } catch (e) {
    throw new UserError(`cannot load ${path}: ${(e as Error).message.split("\n")[0]}`);
  }
}

export abstract class NativeBackend implements Backend {
  abstract readonly kind: BackendKind;
  abstract readonly deviceName: string;
  abstract readonly graphs: boolean;
  abstract readonly programmaticLaunch: boolean;
  abstract readonly persistentStep: PersistentStepBuild | null;
  abstract readonly issueIsAsync: boolean;
  abstract readonly memInfoSource: string;
  abstract readonly studyDefaults: StudyDefaults;
  readonly ops: OpSymbols;
  private readonly live = new Set<number>();
  private readonly memWords = new BigUint64Array(2);

  protected constructor(
    protected readonly sym: BaseSymbols & OpSymbols,
    private readonly closeLibrary: () => void,
  ) {
    this.ops = sym;
  }

  /** Throws a one-line error naming the backend's error code if the last call failed. */
  protected check(code: number, what: string): void {
    if (code !== 0) {
      throw new UserError(
        `${this.kind} backend: ${what} failed: ${this.sym.be_error_name(code)} (${this.sym.be_error_string(code)})`,
      );
    }
  }

  alloc(bytes: number, written: Written = "in part"): DeviceBuffer {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new Error(`alloc: bad size ${bytes}`);
    const ptr = written === "whole" ? this.sym.be_alloc_whole(bytes) : this.sym.be_alloc(bytes);
    if (!ptr) {
      this.check(this.sym.be_last_error() || ERROR_MEMORY_ALLOCATION, `allocating ${bytes} bytes`);
    }
    this.live.add(ptr!);
    return { ptr: ptr!, bytes };
  }

  free(buffer: DeviceBuffer): void {
    if (!this.live.delete(buffer.ptr)) return;
    this.check(this.sym.be_free(buffer.ptr), "free");
  }

  private span(buffer: DeviceBuffer, offset: number, bytes: number, what: string): number {
    if (offset < 0 || offset + bytes > buffer.bytes) {
      throw new Error(`${what}: ${bytes} bytes at offset ${offset} outside a ${buffer.bytes}-byte buffer`);
    }
    return buffer.ptr + offset;
  }

  upload(dst: DeviceBuffer, src: ArrayBufferView, dstOffsetBytes = 0): void {
    if (src.byteLength === 0) return;
    this.check(
      this.sym.be_upload(this.span(dst, dstOffsetBytes, src.byteLength, "upload"), src, src.byteLength),
      "upload",
    );
  }

  uploadMatrix(dst: DeviceBuffer, src: MatrixElements, dstOffsetBytes = 0): void {
    const { data, rows, cols, first } = src;
    const count = data.length;
    if (count === 0) return;
    const elementBytes = data.BYTES_PER_ELEMENT;
    if (first < 0 || first + count > rows * cols)
      throw new Error(`uploadMatrix: elements ${first}..${first + count} outside a ${rows} x ${cols} matrix`);
    const at = this.span(dst, dstOffsetBytes, rows * cols * elementBytes, "uploadMatrix");
    this.check(this.sym.be_upload_matrix(at, data, first, count, rows, cols, elementBytes), "uploadMatrix");
  }

  download(src: DeviceBuffer, dst: ArrayBufferView, srcOffsetBytes = 0): void {
    if (dst.byteLength === 0) return;
    this.check(
      this.sym.be_download(dst, this.span(src, srcOffsetBytes, dst.byteLength, "download"), dst.byteLength),
      "download",
    );
  }

  fill32(dst: DeviceBuffer, word: number, count = Math.floor(dst.bytes / 4)): void {
    this.check(this.sym.be_fill_u32(this.span(dst, 0, count * 4, "fill"), word >>> 0, count), "fill");
  }

  synchronize(): void {
    this.check(this.sym.be_synchronize(), "synchronize");
  }

  memInfo(): MemoryInfo {
    this.check(this.sym.be_mem_info(this.memWords), "memory info");
    return { free: Number(this.memWords[0]), total: Number(this.memWords[1]) };
  }

  readonly residentSource: string = "bytes allocated (device memory is committed when it is allocated)";

  residentBytes(_ptr: number, bytes: number): number {
    return bytes;
  }

  attentionScratchBytes(rows: number, C: number, nHead: number, nKv: number, maxCtx: number): number {
    return Number(this.sym.op_attention_scratch_bytes(rows, C, nHead, nKv, maxCtx));
  }

  partialsBytes(maxRows: number, maxIn: number, maxOut: number, V: number): number {
    return Number(this.sym.op_partials_bytes(maxRows, maxIn, maxOut, V));
  }

  /** Records the plan natively; subclasses add graphs. */
  protected recordPlan(plan: EncodedPlan): { handle: number; runNative: (n?: number) => void; destroy: () => void } {
    const handle = this.sym.plan_create(plan.records, plan.ops.length);
    if (!handle) throw new Error("plan_create rejected the plan (unknown opcode)");
    return {
      handle,
      runNative: (n = 1) => {
        for (let i = 0; i < n; i++) this.sym.plan_run(handle);
      },
      destroy: () => this.sym.plan_destroy(handle),
    };
  }

  abstract record(plan: EncodedPlan): RecordedStep;
  abstract describe(): BackendDescription;
  abstract instrument(): Instrument;

  close(): void {
    for (const ptr of this.live) this.sym.be_free(ptr);
    this.live.clear();
    this.closeLibrary();
  }
}
