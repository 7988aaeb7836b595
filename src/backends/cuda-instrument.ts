// The CUDA backend's instrument: events around a step, CUPTI kernel and launch-API records inside it.
import { CuptiTracer, type RawApiRecord, type RawKernelRecord } from "../native/cupti.ts";
import { kernelFamily } from "../ops.ts";
import type { PlanOp } from "../plan.ts";
import {
  EMPTY_OPS,
  nowMs,
  opInterval,
  PEAK_CALLS,
  type HostInterval,
  type Instrument,
  type LaunchFloor,
  type OpInterval,
  type Peaks,
  type TimedStep,
  type TraceResult,
  type TracedStep,
} from "./instrument.ts";

/** grid barriers per measurement (the emulator's fibers switch at each: fewer there) */
const GRID_BARRIERS = 1000,
  EMULATED_GRID_BARRIERS = 20;

/**
 * CUPTI records → one traced step per host window [h0, h1) (CUPTI's clock, ns since the tracer's origin).
 * A step's kernels are those starting in its window (up to the next step's start), in start order, matched
 * to the plan's ops by position; a step whose kernels do not match the plan one-to-one is listed as
 * mismatched. Records CUPTI delivered broken (end before start, or before the first window) are dropped.
 */
export function stepsFromCupti(
  windows: Array<[number, number]>,
  allKernels: RawKernelRecord[],
  allApi: RawApiRecord[],
  droppedByCupti: number,
  ops: PlanOp[],
  label: string,
): Omit<TraceResult, "wallMs"> {
  const kernels = allKernels
    .filter((k) => k.end_ns >= k.start_ns && k.start_ns >= windows[0]![0])
    .sort((a, b) => a.start_ns - b.start_ns);
  const api = allApi.filter((a) => a.end_ns >= a.start_ns);
  const steps: TracedStep[] = [];
  const mismatchedSteps: number[] = [];
  windows.forEach(([h0, h1], i) => {
    const end = windows[i + 1]?.[0] ?? Infinity;
    const mine = kernels.filter((k) => k.start_ns >= h0 && k.start_ns < end);
    if (mine.length !== ops.length || mine.some((k, j) => kernelFamily(k.name) !== ops[j]!.family))
      mismatchedSteps.push(i);
    const launches = api.filter((a) => a.start_ns >= h0 && a.end_ns <= h1 && /Launch/.test(a.name));
    const host: HostInterval[] = [
      { kind: "step", name: `step (${label})`, start_us: h0 / 1e3, end_us: h1 / 1e3 },
      ...launches.map(
        (a): HostInterval => ({
          kind: "launch",
          name: a.name,
          start_us: a.start_ns / 1e3,
          end_us: a.end_ns / 1e3,
          correlation: a.correlation,
        }),
      ),
    ];
    const opIntervals = mine.slice(0, ops.length).map(
      (k, j): OpInterval => ({
        ...opInterval(ops[j]!, j, k.name.replace(/\(.*$/, ""), k.start_ns / 1e3, k.end_ns / 1e3),
        grid: k.grid,
        block: k.block,
        registers: k.registers,
        shared_bytes: k.static_shared_bytes + k.dynamic_shared_bytes,
        correlation: k.correlation,
      }),
    );
    steps.push({ host, ops: opIntervals });
  });
  return { steps, dropped: droppedByCupti + (allKernels.length - kernels.length), mismatchedSteps };
}

/** A pair of events on the current stream: device time between two points. */
export interface StepEvents {
  begin(): void;
  finish(): void;
  /** waits for the end event; device milliseconds between the two */
  ms(): number;
  destroy(): void;
}

/** cu_measure_grid_barrier: µs per barrier with every block arriving at once and skewed, in the step's design and the sequentially consistent one. */
export interface GridBarrierMeasurement {
  us: number;
  blocks: number;
  skewedUs: number;
  scUs: number;
  scSkewedUs: number;
}

/** What the instrument uses of the CUDA backend. */
export interface CudaTimers {
  readonly kind: "cuda" | "emu";
  eventTimer(): StepEvents;
  synchronize(): void;
  measureCopyBandwidth(bytes: number, iters: number): number;
  measureFp32Peak(): number;
  measureLaunch(n: number): { hostUs: number; eagerDeviceUs: number; graphNodeUs: number; pdlNodeUs: number | null };
  measureGridBarrier(n: number): GridBarrierMeasurement;
}

export class CudaInstrument implements Instrument {
  private readonly events;
  /** CUPTI is loaded and probed on first use, after the timing pass: attached to the driver it may slow launches */
  private cupti: { tracer: CuptiTracer | null; note: string } | null = null;

  constructor(readonly backend: CudaTimers) {
    this.events = backend.eventTimer();
  }

  private get tracing(): { tracer: CuptiTracer | null; note: string } {
    if (this.cupti) return this.cupti;
    const t = this.backend.kind === "cuda" ? CuptiTracer.open() : { error: "CUPTI needs a GPU (emulated backend)" };
    const problem = t instanceof CuptiTracer ? CudaInstrument.probe(t) : t.error;
    this.cupti = {
      tracer: problem === null ? (t as CuptiTracer) : null,
      note: problem ?? "CUPTI activity records (concurrent kernels, runtime API)",
    };
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

  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], label: string): TraceResult {
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
    return { ...stepsFromCupti(windows, tracer.kernels(), tracer.apiCalls(), tracer.dropped(), ops, label), wallMs };
  }

  /** Empty kernels launched from C++ eagerly and as graph nodes (cu_measure_launch), after a warm-up; the grid barrier. */
  measureLaunch(): LaunchFloor {
    const l = this.backend.measureLaunch(EMPTY_OPS);
    const barriers = this.backend.kind === "emu" ? EMULATED_GRID_BARRIERS : GRID_BARRIERS;
    const barrier = this.backend.measureGridBarrier(barriers);
    return {
      host_us: l.hostUs,
      device_us: l.eagerDeviceUs,
      graph_node_us: l.graphNodeUs,
      pdl_node_us: l.pdlNodeUs,
      grid_barrier_us: barrier.us,
      grid_barrier_skewed_us: barrier.skewedUs,
      grid_barrier_sc_us: barrier.scUs,
      grid_barrier_sc_skewed_us: barrier.scSkewedUs,
      how_measured:
        `${EMPTY_OPS} empty kernels launched from C++ (host clock per call), then 500 enqueued behind a spin kernel that outlasts their issue ` +
        `(events: the device's rate from a full queue), then as one ${EMPTY_OPS}-node graph, plain and with programmatic dependent launch; ` +
        `${barriers} grid barriers of the persistent step in one cooperative launch on the fp32 single-sequence step's ${barrier.blocks} ` +
        `resident blocks, every block arriving at once, then with arrivals skewed by up to 1,792 SM cycles (the spins alone subtracted), ` +
        `each in the step's design (one release arrival per block, acquire polls with a sleep between them) and in the sequentially ` +
        `consistent one (a __threadfence before each arrival, polls back to back)`,
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

  /** A GPU's own memory does not share a host's: its peaks stand for every step. */
  readPass(): null {
    return null;
  }

  close(): void {
    this.events.destroy();
  }
}
