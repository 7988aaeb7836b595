// CUPTI tracer bindings (cuda/cupti/trace.h → build/libgpt2_cupti.so), loaded lazily.
// CUPTI's buffer callbacks stay in C (no JSCallback: they run on CUPTI's thread); records wait in native
// memory and are copied out here after a flush, then decoded with a DataView at the offsets of trace.h.
import { dlopen, FFIType } from "bun:ffi";
import { UserError } from "../errors.ts";
import { ensureBuilt, libraryPath } from "./build.ts";
import { cString, fieldBytes, type StructLayout } from "./struct-layout.ts";

const { ptr, i32, u64, cstring, void: v } = FFIType;

export const CUPTI_SYMBOLS = {
  trace_start: { args: [i32], returns: i32 },
  trace_flush: { args: [], returns: i32 },
  trace_stop: { args: [], returns: i32 },
  trace_kernel_count: { args: [], returns: i32 },
  trace_read_kernels: { args: [ptr, i32], returns: i32 },
  trace_api_count: { args: [], returns: i32 },
  trace_read_api: { args: [ptr, i32], returns: i32 },
  trace_clear: { args: [], returns: v },
  trace_timestamp: { args: [], returns: u64 },
  trace_dropped: { args: [], returns: i32 },
  trace_error_string: { args: [i32], returns: cstring },
  trace_driver_available: { args: [], returns: i32 },
  trace_record_sizes: { args: [ptr], returns: v },
  trace_selftest_inject: { args: [i32, u64], returns: v },
} as const;

type CuptiLib = ReturnType<typeof dlopen<typeof CUPTI_SYMBOLS>>["symbols"];

/** trace_start flags (trace.h). */
const TRACE_RUNTIME_API = 1;
const TRACE_DRIVER_API = 2;

/** TraceKernel (cuda/cupti/trace.h): one kernel execution. The library reports its size and open() compares. */
export const TRACE_KERNEL: StructLayout<
  | "start_ns"
  | "end_ns"
  | "graph_node_id"
  | "correlation_id"
  | "graph_id"
  | "stream_id"
  | "grid"
  | "block"
  | "registers"
  | "static_shared"
  | "dynamic_shared"
  | "name"
> = {
  struct: "TraceKernel",
  header: "cupti/trace.h",
  bytes: 200,
  fields: {
    start_ns: 0,
    end_ns: 8,
    graph_node_id: 16,
    correlation_id: 24,
    graph_id: 28,
    stream_id: 32,
    grid: 36,
    block: 48,
    registers: 60,
    static_shared: 64,
    dynamic_shared: 68,
    name: 72,
  },
};

/** TraceApi (cuda/cupti/trace.h): one runtime or driver API call. */
export const TRACE_API: StructLayout<
  "start_ns" | "end_ns" | "correlation_id" | "cbid" | "domain" | "return_value" | "process_id" | "thread_id" | "name"
> = {
  struct: "TraceApi",
  header: "cupti/trace.h",
  bytes: 104,
  fields: {
    start_ns: 0,
    end_ns: 8,
    correlation_id: 16,
    cbid: 20,
    domain: 24,
    return_value: 28,
    process_id: 32,
    thread_id: 36,
    name: 40,
  },
};

/** One kernel execution. Times are ns on CUPTI's clock, relative to the tracer's origin (`origin_ns`). */
export interface RawKernelRecord {
  start_ns: number;
  end_ns: number;
  /** matches the launching API call's correlation (for a graph's kernels, the cudaGraphLaunch's) */
  correlation: number;
  stream: number;
  /** 0 / 0n unless the kernel ran as a node of a CUDA graph */
  graph_id: number;
  graph_node_id: bigint;
  grid: [number, number, number];
  block: [number, number, number];
  /** per thread */
  registers: number;
  /** per block */
  static_shared_bytes: number;
  dynamic_shared_bytes: number;
  /** demangled, e.g. "layernorm_kernel(float*, float const*, int)"; at most 127 bytes */
  name: string;
}

/** One runtime or driver API call, on the same time axis as the kernels. */
export interface RawApiRecord {
  start_ns: number;
  end_ns: number;
  correlation: number;
  /** CUPTI callback id within its domain, e.g. 211 = cudaLaunchKernel (runtime) */
  cbid: number;
  domain: "runtime" | "driver";
  /** cudaError_t / CUresult the call returned */
  return_value: number;
  process_id: number;
  thread_id: number;
  /** e.g. "cudaLaunchKernel", "cudaGraphLaunch" */
  name: string;
}

export interface StartOptions {
  /** runtime API records (cudaLaunchKernel, cudaGraphLaunch, …); default true */
  runtime?: boolean;
  /** driver API records (cuLaunchKernel, …); default false */
  driver?: boolean;
}

/** A CUPTI call failed: one line naming the CUPTI error (and the missing driver when that is the cause). */
export class CuptiError extends UserError {
  override name = "CuptiError";
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

/** CUpti_CallbackDomain of the driver API in TraceApi.domain */
const DOMAIN_DRIVER = 1;

function decodeKernels(buf: ArrayBuffer, n: number, origin: bigint): RawKernelRecord[] {
  const dv = new DataView(buf);
  const bytes = new Uint8Array(buf);
  const f = TRACE_KERNEL.fields;
  const nameBytes = fieldBytes(TRACE_KERNEL, "name");
  const out: RawKernelRecord[] = [];
  for (let i = 0; i < n; i++) {
    const o = i * TRACE_KERNEL.bytes;
    const i32at = (off: number) => dv.getInt32(o + off, true);
    const triple = (off: number): [number, number, number] => [i32at(off), i32at(off + 4), i32at(off + 8)];
    out.push({
      start_ns: Number(dv.getBigUint64(o + f.start_ns, true) - origin),
      end_ns: Number(dv.getBigUint64(o + f.end_ns, true) - origin),
      graph_node_id: dv.getBigUint64(o + f.graph_node_id, true),
      correlation: dv.getUint32(o + f.correlation_id, true),
      graph_id: dv.getUint32(o + f.graph_id, true),
      stream: dv.getUint32(o + f.stream_id, true),
      grid: triple(f.grid),
      block: triple(f.block),
      registers: i32at(f.registers),
      static_shared_bytes: i32at(f.static_shared),
      dynamic_shared_bytes: i32at(f.dynamic_shared),
      name: cString(bytes, o + f.name, nameBytes),
    });
  }
  return out;
}

function decodeApi(buf: ArrayBuffer, n: number, origin: bigint): RawApiRecord[] {
  const dv = new DataView(buf);
  const bytes = new Uint8Array(buf);
  const f = TRACE_API.fields;
  const nameBytes = fieldBytes(TRACE_API, "name");
  const out: RawApiRecord[] = [];
  for (let i = 0; i < n; i++) {
    const o = i * TRACE_API.bytes;
    const u32at = (off: number) => dv.getUint32(o + off, true);
    out.push({
      start_ns: Number(dv.getBigUint64(o + f.start_ns, true) - origin),
      end_ns: Number(dv.getBigUint64(o + f.end_ns, true) - origin),
      correlation: u32at(f.correlation_id),
      cbid: u32at(f.cbid),
      domain: u32at(f.domain) === DOMAIN_DRIVER ? "driver" : "runtime",
      return_value: u32at(f.return_value),
      process_id: u32at(f.process_id),
      thread_id: u32at(f.thread_id),
      name: cString(bytes, o + f.name, nameBytes),
    });
  }
  return out;
}

let cached: CuptiTracer | { error: string } | undefined;

/**
 * The process's CUPTI tracer (CUPTI's activity state is global, so there is one).
 * Kernels are always traced; API records per StartOptions. Read after flush() (synchronise the device first).
 */
export class CuptiTracer {
  /** CUPTI's clock when the tracer was opened: every record's and now_ns()'s zero. */
  readonly origin_ns: bigint;

  private constructor(private readonly lib: CuptiLib) {
    this.origin_ns = lib.trace_timestamp() as bigint;
  }

  /** Builds (if stale) and loads the library; never throws. */
  static open(): CuptiTracer | { error: string } {
    if (cached) return cached;
    cached = CuptiTracer.load();
    return cached;
  }

  private static load(): CuptiTracer | { error: string } {
    try {
      ensureBuilt("cupti");
    } catch (e) {
      return { error: `CUPTI tracer library could not be built: ${firstLine(e)}` };
    }
    let lib: CuptiLib;
    try {
      lib = dlopen(libraryPath("cupti"), CUPTI_SYMBOLS).symbols;
    } catch (e) {
      return { error: `CUPTI tracer library could not be loaded (${libraryPath("cupti")}): ${firstLine(e)}` };
    }
    const sizes = new Int32Array(2);
    lib.trace_record_sizes(sizes);
    if (sizes[0] !== TRACE_KERNEL.bytes || sizes[1] !== TRACE_API.bytes) {
      return {
        error: `CUPTI tracer record sizes ${sizes[0]}/${sizes[1]} differ from the reader's ${TRACE_KERNEL.bytes}/${TRACE_API.bytes}`,
      };
    }
    return new CuptiTracer(lib);
  }

  /** Enables tracing; throws CuptiError (one line) where CUPTI cannot trace, e.g. without a driver or device. */
  start(opts: StartOptions = {}): void {
    const flags = ((opts.runtime ?? true) ? TRACE_RUNTIME_API : 0) | (opts.driver ? TRACE_DRIVER_API : 0);
    const code = this.lib.trace_start(flags);
    if (code === 0) return;
    const cause = this.driverAvailable() ? "" : "; no CUDA driver (libcuda.so.1 cannot be loaded)";
    throw new CuptiError(`CUPTI tracing could not start: ${this.errorName(code)} (${code})${cause}`, code);
  }

  /** Whether the CUDA driver library loads (without it CUPTI cannot trace). */
  driverAvailable(): boolean {
    return this.lib.trace_driver_available() === 1;
  }

  /** Forced flush, then disables tracing. Records stay readable until clear(). */
  stop(): void {
    this.check("stop", this.lib.trace_stop());
  }

  /** Delivers completed record buffers so kernels() / apiCalls() see them. */
  flush(): void {
    this.check("flush", this.lib.trace_flush());
  }

  kernels(): RawKernelRecord[] {
    const count = this.lib.trace_kernel_count();
    if (count === 0) return [];
    const buf = new ArrayBuffer(count * TRACE_KERNEL.bytes);
    const n = this.lib.trace_read_kernels(new Uint8Array(buf), count);
    return decodeKernels(buf, n, this.origin_ns);
  }

  apiCalls(): RawApiRecord[] {
    const count = this.lib.trace_api_count();
    if (count === 0) return [];
    const buf = new ArrayBuffer(count * TRACE_API.bytes);
    const n = this.lib.trace_read_api(new Uint8Array(buf), count);
    return decodeApi(buf, n, this.origin_ns);
  }

  /** Records lost since the last clear() (no CUPTI buffer space, or kernels delivered without timestamps). */
  dropped(): number {
    return this.lib.trace_dropped();
  }

  /** Forgets the records read so far and the dropped count. */
  clear(): void {
    this.lib.trace_clear();
  }

  /** Now on the records' time axis (ns since origin_ns): sample it beside performance.now() to relate the clocks. */
  now_ns(): number {
    return Number((this.lib.trace_timestamp() as bigint) - this.origin_ns);
  }

  /** Test hook: see trace_selftest_inject in cuda/cupti/trace.h. */
  selftestInject(n: number, base_ns: bigint): void {
    this.lib.trace_selftest_inject(n, base_ns);
  }

  private errorName(code: number): string {
    return String(this.lib.trace_error_string(code));
  }

  private check(what: string, code: number): void {
    if (code !== 0) throw new CuptiError(`CUPTI ${what} failed: ${this.errorName(code)} (${code})`, code);
  }
}

/** The message's first line, plus the compiler's first error line when it is a build log. */
function firstLine(e: unknown): string {
  const lines = (e instanceof Error ? e.message : String(e)).split("\n");
  const compilerError = lines.slice(1).find((l) => /error/i.test(l));
  return compilerError ? `${lines[0]} ${compilerError.trim()}` : lines[0]!;
}
