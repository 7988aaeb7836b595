// The CPU backend's instrument: wall clock around a step, and the CPU library's native per-op timers.
import { familyOfCode, type OpSymbols } from "../ops.ts";
import type { PlanOp } from "../plan.ts";
import {
  EMPTY_OPS,
  nowMs,
  opInterval,
  type HostInterval,
  type Instrument,
  type LaunchFloor,
  type OpInterval,
  type Peaks,
  type TimedStep,
  type TraceResult,
  type TracedStep,
} from "./instrument.ts";
import { measureRead, type ReadProbeBackend, type ReadTracker } from "./read-probe.ts";

/**
 * On the CPU the host runs the ops itself: what it spends issuing a step is the time between them
 * (TypeScript, FFI, waking the thread team), from the step's start to its first op, between ops, and
 * after the last one.
 */
function dispatchGaps(label: string, startUs: number, endUs: number, ops: OpInterval[]): HostInterval[] {
  const edges = [startUs, ...ops.flatMap((o) => [o.start_us, o.end_us]), endUs];
  const gaps: HostInterval[] = [];
  for (let i = 0; i + 1 < edges.length; i += 2) {
    if (edges[i + 1]! > edges[i]!)
      gaps.push({ kind: "step", name: `dispatch (${label})`, start_us: edges[i]!, end_us: edges[i + 1]! });
  }
  return gaps;
}

/** Passes of cpu_measure_fp32_peak (~2 ms each): on a shared machine only a pass every thread ran undisturbed counts. */
export const FP32_PEAK_PASSES = 20;

/** One op's native timer record (CLOCK_MONOTONIC ns). */
export interface CpuOpRecord {
  code: number;
  startNs: number;
  endNs: number;
}

/** What the instrument uses of the CPU backend. */
export interface CpuTimers extends ReadProbeBackend {
  readonly ops: OpSymbols;
  readonly threads: number;
  startTimers(): void;
  stopTimers(): { records: CpuOpRecord[]; dropped: number };
  /** the op timers' clock (CLOCK_MONOTONIC), ns */
  nowNs(): number;
  measureFp32Peak(passes?: number): number;
}

export class CpuInstrument implements Instrument {
  readonly canTrace = true;
  readonly tracingNote = "native per-op timers (CLOCK_MONOTONIC) in the CPU library";
  private readonly originNs: number;
  /** the memory's read rate beside the points' steps, from measurePeaks on */
  private tracker: ReadTracker | null = null;

  constructor(readonly backend: CpuTimers) {
    this.originNs = backend.nowNs();
  }

  time(run: () => void): TimedStep {
    const t0 = nowMs();
    run();
    const ms = nowMs() - t0;
    return { deviceMs: ms, hostMs: ms, issueMs: ms };
  }

  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], label: string): TraceResult {
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
    const steps: TracedStep[] = [];
    const mismatchedSteps: number[] = [];
    for (let i = 0; i < count; i++) {
      const mine = records.slice(i * ops.length, (i + 1) * ops.length);
      if (mine.length !== ops.length || mine.some((r, k) => familyOfCode(r.code) !== ops[k]!.family))
        mismatchedSteps.push(i);
      const opIntervals = mine.map((r, k) =>
        opInterval(ops[k]!, k, `op_${ops[k]!.family}`, us(r.startNs), us(r.endNs)),
      );
      steps.push({ host: dispatchGaps(label, us(windows[i]![0]), us(windows[i]![1]), opIntervals), ops: opIntervals });
    }
    return { steps, dropped, mismatchedSteps, wallMs };
  }

  measurePeaks(stepBytes: number): Peaks {
    this.tracker?.close();
    this.tracker = null;
    const { report, tracker, beside } = measureRead(this.backend, stepBytes);
    this.tracker = tracker; // held from here, so that close() frees its buffer whatever throws next
    return {
      bytes_per_s: report.bytes_per_s,
      flops_per_s: this.backend.measureFp32Peak(),
      how_measured: `${report.how_measured}${beside}; fp32: 12 independent FMA chains in the widest vectors, 4 chunks of 2^18 steps per thread, best of ${FP32_PEAK_PASSES}`,
      read_probe: { ...report, tracker_bytes: tracker?.bytes ?? null },
    };
  }

  readPass(stepBytes: number): number | null {
    return this.tracker?.pass(stepBytes) ?? null;
  }

  /** An empty op (GELU of 0 elements) through bun:ffi, timed over many calls: the CPU's dispatch floor. */
  measureLaunch(): LaunchFloor {
    const ops = this.backend.ops;
    const call = () => ops.op_gelu(0, 0, 0);
    for (let i = 0; i < EMPTY_OPS; i++) call();
    const t0 = nowMs();
    for (let i = 0; i < EMPTY_OPS; i++) call();
    const hostUs = ((nowMs() - t0) * 1e3) / EMPTY_OPS;
    return {
      host_us: hostUs,
      device_us: null,
      graph_node_us: null,
      pdl_node_us: null,
      grid_barrier_us: null,
      grid_barrier_skewed_us: null,
      grid_barrier_sc_us: null,
      grid_barrier_sc_skewed_us: null,
      how_measured: `${EMPTY_OPS} empty ops (GELU of 0 elements) through bun:ffi, after as many warm-up calls`,
    };
  }

  close(): void {
    this.tracker?.close();
    this.tracker = null;
  }
}
