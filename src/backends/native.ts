// The part every native backend shares: a library exporting ops.h, plan.h and runtime.h, loaded with bun:ffi.
import { dlopen, type Library } from "bun:ffi";

import { UserError } from "../errors.ts";
import type { LaunchMode } from "../profile/types.ts";
import type { EncodedPlan } from "../plan.ts";
import { OP_SYMBOLS, PLAN_SYMBOLS, RUNTIME_SYMBOLS } from "../native/symbols.ts";
import type { Backend, BackendKind, DeviceBuffer, MemoryInfo, OpSymbols, RecordedStep } from "./backend.ts";

const BASE_SYMBOLS = { ...OP_SYMBOLS, ...PLAN_SYMBOLS, ...RUNTIME_SYMBOLS };
type BaseSymbols = Library<typeof BASE_SYMBOLS>["symbols"];

/** Opens a backend library, turning a missing or broken file into one clear line. */
export function openLibrary<S extends Record<string, { args: readonly unknown[]; returns: unknown }>>(
  path: string,
  extra: S,
): Library<typeof BASE_SYMBOLS & S> {
  try {
    return dlopen(path, { ...BASE_SYMBOLS, ...extra } as typeof BASE_SYMBOLS & S);
  } catch (e) {
    throw new UserError(`cannot load ${path}: ${(e as Error).message.split("\n")[0]}`);
  }
}

export abstract class NativeBackend implements Backend {
  abstract readonly kind: BackendKind;
  abstract readonly deviceName: string;
  abstract readonly modes: readonly LaunchMode[];
  readonly ops: OpSymbols;
  private readonly live = new Set<number>();
  private readonly memWords = new BigUint64Array(2);

  protected constructor(protected readonly sym: BaseSymbols, private readonly closeLibrary: () => void) {
    this.ops = sym as unknown as OpSymbols;
  }

  /** Throws a one-line error naming the backend's error code if the last call failed. */
  protected check(code: number, what: string): void {
    if (code !== 0) {
      throw new UserError(`${this.kind} backend: ${what} failed: ${this.sym.be_error_name(code)} (${this.sym.be_error_string(code)})`);
    }
  }

  alloc(bytes: number): DeviceBuffer {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new Error(`alloc: bad size ${bytes}`);
    const ptr = this.sym.be_alloc(bytes);
    if (!ptr) {
      this.check(this.sym.be_last_error() || 2, `allocating ${bytes} bytes`);
    }
    this.live.add(ptr as number);
    return { ptr: ptr as number, bytes };
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
    this.check(this.sym.be_upload(this.span(dst, dstOffsetBytes, src.byteLength, "upload"), src, src.byteLength), "upload");
  }

  download(src: DeviceBuffer, dst: ArrayBufferView, srcOffsetBytes = 0): void {
    if (dst.byteLength === 0) return;
    this.check(this.sym.be_download(dst, this.span(src, srcOffsetBytes, dst.byteLength, "download"), dst.byteLength), "download");
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

  attentionScratchBytes(T: number, C: number, nHead: number, maxCtx: number): number {
    return Number(this.sym.op_attention_scratch_bytes(T, C, nHead, maxCtx));
  }

  /** Records the plan natively; subclasses add graphs. */
  protected recordPlan(plan: EncodedPlan): { handle: number; runNative: (n?: number) => void; destroy: () => void } {
    const handle = this.sym.plan_create(plan.records, plan.ops.length) as number;
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

  close(): void {
    for (const ptr of this.live) this.sym.be_free(ptr);
    this.live.clear();
    this.closeLibrary();
  }
}
