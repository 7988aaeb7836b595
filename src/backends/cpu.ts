// The CPU backend: the CPU twins (cuda/*.cpp) in libgpt2_cpu.so, multi-threaded by its own thread pool.
import { cpus } from "node:os";

import { ensureBuilt } from "../native/build.ts";
import { CPU_SYMBOLS } from "../native/symbols.ts";
import type { EncodedPlan } from "../plan.ts";
import {
  HOST_STUDY_DEFAULTS,
  type BackendDescription,
  type DeviceBuffer,
  type MemoryInfo,
  type RecordedStep,
} from "./backend.ts";
import { CpuInstrument, FP32_PEAK_PASSES, type CpuOpRecord, type CpuTimers } from "./cpu-instrument.ts";
import type { Instrument } from "./instrument.ts";
import { NativeBackend, openLibrary } from "./native.ts";
import { counted } from "../words.ts";

/** cpu_runtime.h as called from TypeScript */
interface CpuSymbols {
  cpu_now_ns(): number | bigint;
  cpu_threads(): number;
  cpu_resident_bytes(): number | bigint;
  cpu_resident_range_bytes(ptr: number, bytes: number): number | bigint;
  cpu_set_threads(n: number): void;
  cpu_read_prepare(data: number, bytes: number): number;
  cpu_read_pass(data: number, bytes: number): number;
  cpu_measure_fp32_peak(iters: number): number;
  cpu_pool_check(jobs: number): number;
  prof_enable(on: number): void;
  prof_reset(): void;
  prof_count(): number;
  prof_dropped(): number;
  prof_read(out: BigInt64Array, max: number): number;
}

function openCpuLibrary(path = ensureBuilt("cpu", { quiet: true }).path) {
  return openLibrary<CpuSymbols>(path, CPU_SYMBOLS);
}
type CpuLibrary = ReturnType<typeof openCpuLibrary>;

export class CpuBackend extends NativeBackend implements CpuTimers {
  readonly kind = "cpu" as const;
  readonly graphs = false;
  readonly programmaticLaunch = false;
  readonly persistentStep = null;
  readonly issueIsAsync = false;
  readonly memInfoSource =
    "host memory not held resident by the CPU library's allocations (MemTotal − their resident pages, mincore)";
  readonly studyDefaults = HOST_STUDY_DEFAULTS;
  readonly cpu: CpuLibrary["symbols"];

  private constructor(lib: CpuLibrary) {
    super(lib.symbols, () => lib.close());
    this.cpu = lib.symbols;
  }

  /** the CPU and the threads the library runs on now (--threads sets them after the library opens) */
  get deviceName(): string {
    return `${cpus()[0]?.model ?? "CPU"} × ${counted(this.cpu.cpu_threads(), "thread")}`;
  }

  /** The library on every CPU this process may run on (sched_getaffinity); setThreads changes that. */
  static open(): CpuBackend {
    return new CpuBackend(openCpuLibrary());
  }

  setThreads(threads: number): void {
    this.cpu.cpu_set_threads(threads);
  }

  /** A CPU library at a given path (a test's planted-bug variant). */
  static openPath(path: string): CpuBackend {
    return new CpuBackend(openCpuLibrary(path));
  }

  get threads(): number {
    return this.cpu.cpu_threads();
  }

  describe(): BackendDescription {
    return { backend: "cpu", name: this.deviceName, detail: { threads: this.threads } };
  }

  instrument(): Instrument {
    return new CpuInstrument(this);
  }

  /**
   * Host memory from the backend's point of view, as a device reports its own: total − what this library's
   * allocations hold resident (cpu_resident_bytes, mincore over be_alloc's mappings). A delta of it is exact
   * to the page, where the process's RSS also moves with the JS heap, on its own threads.
   */
  override memInfo(): MemoryInfo {
    const { total } = super.memInfo();
    return { free: total - Number(this.cpu.cpu_resident_bytes()), total };
  }

  override readonly residentSource = "resident pages (mincore): host memory is committed on first write";

  override residentBytes(ptr: number, bytes: number): number {
    return Number(this.cpu.cpu_resident_range_bytes(ptr, bytes));
  }

  record(plan: EncodedPlan): RecordedStep {
    const native = this.recordPlan(plan);
    return { ops: plan.ops.length, runNative: native.runNative, destroy: native.destroy };
  }

  /** Per-op timers: the CPU's analogue of CUPTI kernel records. */
  startTimers(): void {
    this.cpu.prof_reset();
    this.cpu.prof_enable(1);
  }

  stopTimers(): { records: CpuOpRecord[]; dropped: number } {
    this.cpu.prof_enable(0);
    const n = this.cpu.prof_count();
    const raw = new BigInt64Array(Math.max(1, n) * 3);
    const got = this.cpu.prof_read(raw, n);
    const records: CpuOpRecord[] = [];
    for (let i = 0; i < got; i++) {
      records.push({ code: Number(raw[3 * i]), startNs: Number(raw[3 * i + 1]), endNs: Number(raw[3 * i + 2]) });
    }
    return { records, dropped: this.cpu.prof_dropped() };
  }

  /** the op timers' clock (CLOCK_MONOTONIC), ns */
  nowNs(): number {
    return Number(this.cpu.cpu_now_ns());
  }

  /** the read probe's buffer (src/backends/read-probe.ts): huge pages where given, written once */
  readPrepare(buffer: DeviceBuffer): void {
    if (this.cpu.cpu_read_prepare(buffer.ptr, buffer.bytes) !== 0)
      throw new RangeError(`read probe: a buffer of ${buffer.bytes} bytes`);
  }

  /** seconds of one read pass over the first `bytes` of the probe's buffer */
  readPass(buffer: DeviceBuffer, bytes: number): number {
    return this.cpu.cpu_read_pass(buffer.ptr, bytes);
  }

  measureFp32Peak(passes = FP32_PEAK_PASSES): number {
    return this.cpu.cpu_measure_fp32_peak(passes);
  }
}
