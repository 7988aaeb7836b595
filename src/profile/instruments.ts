// How a step is timed and traced on each backend. The CPU: wall clock and the native per-op timers.
// CUDA: events around the step, CUPTI kernel and launch-API records inside it.
import type { Backend } from "../backends/backend.ts";
import { CpuBackend, FP32_PEAK_PASSES } from "../backends/cpu.ts";
import { CudaBackend } from "../backends/cuda.ts";
import { CuptiTracer, type RawApiRecord, type RawKernelRecord } from "../native/cupti.ts";
import { FAMILY_OF_CODE, OP_CODES, type PlanOp } from "../plan.ts";
import type { HostInterval, LaunchFloor, OpFamily, OpInterval, StepTrace, StudyMode } from "./types.ts";

export interface TimedStep {
  /** device time of the step (CUDA events; the wall time on the CPU) */
  deviceMs: number;
  /** host wall time from issuing to completion */
  hostMs: number;
  /** host time until the issuing call returned */
  issueMs: number;
}

export interface Peaks {
  bytes_per_s: number;
  flops_per_s: number;
  how_measured: string;
}

export interface TraceResult {
  steps: StepTrace[];
  dropped: number;
  /** indices of steps whose op records did not line up one-to-one with the plan */
  mismatchedSteps: number[];
  /** host wall time of each traced step, issue to completion (ms) */
  wallMs: number[];
}

export interface Instrument {
  readonly backend: Backend;
  readonly tracingNote: string;
  readonly canTrace: boolean;
  /** times one step issued by `run` */
  time(run: () => void): TimedStep;
  /** runs `count` steps (each after `before`) with op tracing on */
  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], mode: StudyMode, context: number): TraceResult;
  measurePeaks(): Peaks;
  /** the cost of dispatching an op with no work in it */
  measureLaunch(): LaunchFloor;
  close(): void;
}

const nowMs = () => Bun.nanoseconds() / 1e6;
/** peak measurements repeated, the best kept */
const PEAK_CALLS = 8;
/** empty ops per launch-floor measurement */
const EMPTY_OPS = 2000;

/** Fills an op interval's plan fields. */
function opInterval(op: PlanOp, index: number, name: string, startUs: number, endUs: number): OpInterval {
  return { index, family: op.family, layer: op.layer, label: op.label, name, start_us: startUs, end_us: endUs };
}

/**
 * On the CPU the host runs the ops itself: what it spends issuing a step is the time between them
 * (TypeScript, FFI, waking the thread team), from the step's start to its first op, between ops, and
 * after the last one.
 */
function dispatchGaps(mode: StudyMode, startUs: number, endUs: number, ops: OpInterval[]): HostInterval[] {
  const edges = [startUs, ...ops.flatMap((o) => [o.start_us, o.end_us]), endUs];
  const gaps: HostInterval[] = [];
  for (let i = 0; i + 1 < edges.length; i += 2) {
    if (edges[i + 1]! > edges[i]!) gaps.push({ kind: "step", name: `dispatch (${mode})`, start_us: edges[i]!, end_us: edges[i + 1]! });
  }
  return gaps;
}

export class CpuInstrument implements Instrument {
  readonly canTrace = true;
  readonly tracingNote = "native per-op timers (CLOCK_MONOTONIC) in the CPU library";
  private readonly originNs: number;

  constructor(readonly backend: CpuBackend) {
    this.originNs = backend.nowNs();
  }

  time(run: () => void): TimedStep {
    const t0 = nowMs();
    run();
    const ms = nowMs() - t0;
    return { deviceMs: ms, hostMs: ms, issueMs: ms };
  }

  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], mode: StudyMode, context: number): TraceResult {
    const us = (ns: number) => (ns - this.originNs) / 1e3;
    const windows: Array<[number, number]> = [];
    this.backend.startTimers();
    for (let i = 0; i < count; i++) {
      before();
      const h0 = this.backend.nowNs();
      run();
      windows.push([h0, this.backend.nowNs()]);
    }
    const { records, dropped } = this.backend.stopTimers();
    const wallMs = windows.map(([h0, h1]) => (h1 - h0) / 1e6);
    const steps: StepTrace[] = [];
    const mismatchedSteps: number[] = [];
    for (let i = 0; i < count; i++) {
      const mine = records.slice(i * ops.length, (i + 1) * ops.length);
      if (mine.length !== ops.length || mine.some((r, k) => FAMILY_OF_CODE[r.code] !== ops[k]!.family)) mismatchedSteps.push(i);
      const opIntervals = mine.map((r, k) => opInterval(ops[k]!, k, `op_${ops[k]!.family}`, us(r.startNs), us(r.endNs)));
      steps.push({ mode, context, host: dispatchGaps(mode, us(windows[i]![0]), us(windows[i]![1]), opIntervals), ops: opIntervals });
    }
    return { steps, dropped, mismatchedSteps, wallMs };
  }

  measurePeaks(): Peaks {
    const bytes = this.backend.measureReadBandwidth(512 * 2 ** 20, 8);
    const flops = this.backend.measureFp32Peak();
    return {
      bytes_per_s: bytes,
      flops_per_s: flops,
      how_measured: `read bandwidth: best of 8 passes summing 512 MiB on ${this.backend.threads} threads; fp32: 12 independent FMA chains in the widest vectors, 4 chunks of 2^18 steps per thread, best of ${FP32_PEAK_PASSES}`,
    };
  }

  /** An empty op (GELU of 0 elements) through bun:ffi, timed over many calls: the CPU's dispatch floor. */
  measureLaunch(): LaunchFloor {
    const ops = this.backend.ops;
    const call = () => ops.op_gelu(0, 0, 0);
    for (let i = 0; i < EMPTY_OPS; i++) call();
    const t0 = nowMs();
    for (let i = 0; i < EMPTY_OPS; i++) call();
    const hostUs = ((nowMs() - t0) * 1e3) / EMPTY_OPS;
    return { host_us: hostUs, device_us: null, graph_node_us: null, how_measured: `${EMPTY_OPS} empty ops (GELU of 0 elements) through bun:ffi, after as many warm-up calls` };
  }

  close(): void {}
}

const FAMILIES = Object.keys(OP_CODES) as OpFamily[];

/** The op family a kernel belongs to: kernels carry their family in their name (`linear_matvec_kernel`, …). */
export function kernelFamily(name: string): OpFamily | null {
  const base = name.replace(/\(.*$/, "");
  return FAMILIES.find((f) => base.includes(f)) ?? null;
}

/**
 * CUPTI records → one StepTrace per host window [h0, h1) (CUPTI's clock, ns since the tracer's origin).
 * A step's kernels are those starting in its window (up to the next step's start), in start order, matched
 * to the plan's ops by position; a step whose kernels do not match the plan one-to-one is listed as
 * mismatched. Records CUPTI delivered broken (end before start, or before the first window) are dropped.
 */
export function stepsFromCupti(
  windows: Array<[number, number]>, allKernels: RawKernelRecord[], allApi: RawApiRecord[], droppedByCupti: number,
  ops: PlanOp[], mode: StudyMode, context: number,
): Omit<TraceResult, "wallMs"> {
  const kernels = allKernels.filter((k) => k.end_ns >= k.start_ns && k.start_ns >= windows[0]![0]).sort((a, b) => a.start_ns - b.start_ns);
  const api = allApi.filter((a) => a.end_ns >= a.start_ns);
  const steps: StepTrace[] = [];
  const mismatchedSteps: number[] = [];
  windows.forEach(([h0, h1], i) => {
    const end = windows[i + 1]?.[0] ?? Infinity;
    const mine = kernels.filter((k) => k.start_ns >= h0 && k.start_ns < end);
    if (mine.length !== ops.length || mine.some((k, j) => kernelFamily(k.name) !== ops[j]!.family)) mismatchedSteps.push(i);
    const launches = api.filter((a) => a.start_ns >= h0 && a.end_ns <= h1 && /Launch/.test(a.name));
    const host: HostInterval[] = [
      { kind: "step", name: `step (${mode})`, start_us: h0 / 1e3, end_us: h1 / 1e3 },
      ...launches.map((a): HostInterval => ({ kind: "launch", name: a.name, start_us: a.start_ns / 1e3, end_us: a.end_ns / 1e3, correlation: a.correlation })),
    ];
    const opIntervals = mine.slice(0, ops.length).map((k, j): OpInterval => ({
      ...opInterval(ops[j]!, j, k.name.replace(/\(.*$/, ""), k.start_ns / 1e3, k.end_ns / 1e3),
      grid: k.grid, block: k.block, registers: k.registers,
      shared_bytes: k.static_shared_bytes + k.dynamic_shared_bytes, correlation: k.correlation,
    }));
    steps.push({ mode, context, host, ops: opIntervals });
  });
  return { steps, dropped: droppedByCupti + (allKernels.length - kernels.length), mismatchedSteps };
}

export class CudaInstrument implements Instrument {
  private readonly events;
  /** CUPTI is loaded and probed on first use, after the timing pass: attached to the driver it may slow launches */
  private cupti: { tracer: CuptiTracer | null; note: string } | null = null;

  constructor(readonly backend: CudaBackend) {
    this.events = backend.eventTimer();
  }

  private get tracing(): { tracer: CuptiTracer | null; note: string } {
    if (this.cupti) return this.cupti;
    const t = this.backend.kind === "cuda" ? CuptiTracer.open() : { error: "CUPTI needs a GPU (emulated backend)" };
    const problem = t instanceof CuptiTracer ? CudaInstrument.probe(t) : t.error;
    this.cupti = { tracer: problem === null ? (t as CuptiTracer) : null, note: problem ?? "CUPTI activity records (concurrent kernels, runtime API)" };
    return this.cupti;
  }

  get canTrace(): boolean {
    return this.tracing.tracer !== null;
  }

  get tracingNote(): string {
    return this.tracing.note;
  }

  /** Starts and stops tracing once: where CUPTI cannot trace, the profile goes on untraced and says why. */
  private static probe(tracer: CuptiTracer): string | null {
    try {
      tracer.start({ runtime: true });
      tracer.stop();
      tracer.clear();
      return null;
    } catch (e) {
      return `no kernel tracing: ${(e as Error).message}`;
    }
  }

  time(run: () => void): TimedStep {
    const t0 = nowMs();
    this.events.begin();
    run();
    const issueMs = nowMs() - t0;
    this.events.finish();
    const deviceMs = this.events.ms();
    const hostMs = nowMs() - t0;
    this.backend.synchronize(); // a failed launch must not pass for a fast step: the sticky error is raised here
    return { deviceMs, hostMs, issueMs };
  }

  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], mode: StudyMode, context: number): TraceResult {
    const tracer = this.tracing.tracer!;
    tracer.clear();
    tracer.start({ runtime: true });
    const windows: Array<[number, number]> = [];
    const wallMs: number[] = [];
    for (let i = 0; i < count; i++) {
      before();
      this.backend.synchronize();
      const t0 = nowMs();
      const h0 = tracer.now_ns();
      run();
      const h1 = tracer.now_ns();
      this.backend.synchronize();
      wallMs.push(nowMs() - t0);
      windows.push([h0, h1]);
    }
    tracer.stop();
    return { ...stepsFromCupti(windows, tracer.kernels(), tracer.apiCalls(), tracer.dropped(), ops, mode, context), wallMs };
  }

  /** Empty kernels launched from C++ eagerly and as graph nodes (cu_measure_launch), after a warm-up. */
  measureLaunch(): LaunchFloor {
    const l = this.backend.measureLaunch(EMPTY_OPS);
    return {
      host_us: l.hostUs, device_us: l.eagerDeviceUs, graph_node_us: l.graphNodeUs,
      how_measured: `${EMPTY_OPS} empty kernels launched from C++ back to back (host clock per call, events per kernel), then as one ${EMPTY_OPS}-node graph`,
    };
  }

  /** Best of several calls: the first ones can run at idle clocks. */
  measurePeaks(): Peaks {
    const emulated = this.backend.kind === "emu";
    const iters = emulated ? 1 : 20;
    const calls = emulated ? 1 : PEAK_CALLS;
    const bytes = emulated ? 2 ** 20 : 2 ** 30;
    const best = (measure: () => number) => Math.max(...Array.from({ length: calls }, measure));
    return {
      bytes_per_s: best(() => this.backend.measureCopyBandwidth(bytes, iters)),
      flops_per_s: best(() => this.backend.measureFp32Peak()),
      how_measured:
        `device-to-device copy of ${bytes / 2 ** 20} MiB counting read + write bytes, ${iters} copies per timing, best of ${calls}; ` +
        `fp32 FMA kernel filling every SM, best of ${calls}`,
    };
  }

  close(): void {
    this.events.destroy();
  }
}

export function instrumentFor(backend: Backend): Instrument {
  if (backend instanceof CpuBackend) return new CpuInstrument(backend);
  if (backend instanceof CudaBackend) return new CudaInstrument(backend);
  throw new Error(`no instrument for backend ${backend.kind}`);
}
