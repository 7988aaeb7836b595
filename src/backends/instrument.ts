// What a backend's instrument measures: a step's time, the ops inside traced steps, the machine's peaks and
// the cost of dispatching an op with no work in it. Each backend supplies its own (Backend.instrument()).
import type { OpFamily } from "../ops.ts";
import type { PlanOp } from "../plan.ts";

export interface TimedStep {
  /** device time of the step (CUDA events; the wall time on the CPU) */
  deviceMs: number;
  /** host wall time from issuing to completion */
  hostMs: number;
  /** host time until the issuing call returned */
  issueMs: number;
}

/** The probe's figure and how it was had (summary.json: device.peaks.read_probe). */
export interface ReadProbeReport {
  /** the best pass at buffer_bytes: the floor's bandwidth */
  bytes_per_s: number;
  /** every pass at buffer_bytes, bytes/s */
  passes: { count: number; min: number; median: number; max: number };
  buffer_bytes: number;
  /** where the sweep stops falling (src/backends/read-probe.ts kneeOf) */
  knee_bytes: number;
  /** the best pass at each size of the sweep, bytes/s */
  sweep: { bytes: number; bytes_per_s: number }[];
  /** whether memory capped the buffer below the step's bytes */
  capped: boolean;
  /** the buffer read beside each point's timed steps (Instrument.readPass); null where none was */
  tracker_bytes: number | null;
  how_measured: string;
}

export interface Peaks {
  bytes_per_s: number;
  flops_per_s: number;
  how_measured: string;
  /** the CPU's read probe, its size, sweep and passes; a GPU's peaks are a device copy */
  read_probe?: ReadProbeReport;
}

/** One timed interval of one op (a kernel on the GPU, a native op on the CPU), relative to the run's start. */
export interface OpInterval {
  /** index of the op in the step's plan */
  index: number;
  family: OpFamily;
  /** transformer block, or null for embed / ln_f / lm_head / argmax */
  layer: number | null;
  /** the plan's label, e.g. "h3.mlp.c_fc" */
  label: string;
  /** kernel name (GPU) or native function (CPU) */
  name: string;
  start_us: number;
  end_us: number;
  /** launch shape and resources, when known (GPU) */
  grid?: [number, number, number];
  block?: [number, number, number];
  registers?: number;
  shared_bytes?: number;
  correlation?: number;
}

/** A host-side interval: the issue of a step or of one launch (API call), relative to the run's start. */
export interface HostInterval {
  /** "step": issuing the whole step (TypeScript + FFI + launch API); "launch": one launch API call inside it */
  kind: "step" | "launch";
  name: string;
  start_us: number;
  end_us: number;
  correlation?: number;
}

/** One traced step: what the host did and what the device ran. */
export interface TracedStep {
  host: HostInterval[];
  ops: OpInterval[];
}

export interface TraceResult {
  steps: TracedStep[];
  dropped: number;
  /** indices of steps whose op records did not line up one-to-one with the plan */
  mismatchedSteps: number[];
  /** host wall time of each traced step, issue to completion (ms) */
  wallMs: number[];
}

/** What dispatching one op costs with no work in it: the floor a step of many small ops stands on. */
export interface LaunchFloor {
  /** host µs per launch call (GPU: an empty kernel from C++; CPU: an empty op through bun:ffi) */
  host_us: number;
  /** GPU µs per empty kernel launched back to back: the launch rate the device sustains */
  device_us: number | null;
  /** GPU µs per empty kernel node in a graph replay */
  graph_node_us: number | null;
  /** GPU µs per node of a graph captured with programmatic dependent launch (each kernel lets its successor start, then waits) */
  pdl_node_us: number | null;
  /** GPU µs per grid barrier of the persistent step among its resident blocks, every block arriving at once */
  grid_barrier_us: number | null;
  /** the same with the blocks arriving at different times: µs past the last arrival (their spins subtracted) */
  grid_barrier_skewed_us: number | null;
  /** the sequentially consistent design (a __threadfence before each arrival, polls back to back), at once and skewed */
  grid_barrier_sc_us: number | null;
  grid_barrier_sc_skewed_us: number | null;
  how_measured: string;
}

export interface Instrument {
  /** what traces the ops, or why nothing can */
  readonly tracingNote: string;
  readonly canTrace: boolean;
  /** times one step issued by `run` */
  time(run: () => void): TimedStep;
  /** runs `count` steps (each after `before`) with op tracing on; `label` names the host intervals */
  trace(run: () => void, before: () => void, count: number, ops: PlanOp[], label: string): TraceResult;
  /** the machine's peaks; a read bandwidth probe reads at least `stepBytes` where memory allows */
  measurePeaks(stepBytes: number): Peaks;
  /**
   * One pass of the memory read right before a timed step that moves `stepBytes`, in bytes/s as the peaks' probe
   * reads (the CPU, after measurePeaks: a shared host's memory rate can flip between two levels within seconds);
   * null where nothing tracks it, or where the step is smaller than the probe's knee (the last-level cache serves
   * part of it, and a pass would evict that part)
   */
  readPass(stepBytes: number): number | null;
  /** the cost of dispatching an op with no work in it */
  measureLaunch(): LaunchFloor;
  close(): void;
}

/** An op interval with the plan's fields filled in. */
export function opInterval(op: PlanOp, index: number, name: string, startUs: number, endUs: number): OpInterval {
  return { index, family: op.family, layer: op.layer, label: op.label, name, start_us: startUs, end_us: endUs };
}

/** A timed step's device ms and the memory's read rate in the pass right before it (Instrument.readPass), bytes/s. */
export interface PairedStep {
  ms: number;
  read: number | null;
}

/** The peaks with the memory's read rate beside a point's steps in place of the probe's, where one was tracked. */
export const peaksBeside = (peaks: Peaks, read: number | null | undefined): Peaks =>
  read == null ? peaks : { ...peaks, bytes_per_s: read };

/** A monotonic host clock in ms. */
export const nowMs = () => Bun.nanoseconds() / 1e6;
/** peak measurements repeated, the best kept */
export const PEAK_CALLS = 8;
/** empty ops per launch-floor measurement */
export const EMPTY_OPS = 2000;

/** The persistent step's barrier as it dispatches an op: the dearer of its two arrival patterns (null: not measured). */
export function gridBarrierUs(launch: LaunchFloor): number | null {
  const measured = [launch.grid_barrier_us, launch.grid_barrier_skewed_us].filter((x): x is number => x !== null);
  return measured.length ? Math.max(...measured) : null;
}
