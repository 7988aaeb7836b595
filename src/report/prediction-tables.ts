// The kernel model's predictions as tables (bun run verify): per kernel of one step, and per step in every
// launch mode with each estimate's optimistic and pessimistic ends. Every figure is labelled a prediction.
import {
  GPU_MODELS,
  MODEL_MODES,
  type GpuModel,
  type GpuName,
  type KernelPrediction,
  type PredictionRange,
  type StepPrediction,
} from "../profile/kernel-model/index.ts";
import { renderTable } from "./tables.ts";

const us = (x: number) => x.toFixed(2);
const mb = (bytes: number) => (bytes / 1e6).toFixed(2);

/** Kernels of one step, those of the same family and shape in every layer folded into one row ("h*.…" × 12). */
export function kernelPredictionTable(step: StepPrediction): string {
  const groups = new Map<string, { k: KernelPrediction; calls: number }>();
  for (const k of step.kernels) {
    const label = k.label.replace(/^h\d+\./, "h*.");
    const key = `${label} ${k.bytes} ${k.blocks}`;
    const g = groups.get(key);
    if (g) g.calls++;
    else groups.set(key, { k: { ...k, label }, calls: 1 });
  }
  const columns = [
    "kernel (op)",
    "calls",
    "MB",
    "blocks x threads",
    "regs",
    "16 B loads/thread",
    "MB in flight",
    "bytes µs",
    "compute µs",
    "latency µs",
    "chain µs",
    "predicted µs",
    "bound",
  ].map((header) => ({ header }));
  const rows = [...groups.values()].map(({ k, calls }) => [
    `${k.label} (${k.family})`,
    calls,
    mb(k.bytes),
    `${k.blocks} x ${k.threads}`,
    k.registers,
    `${k.loadsInFlight}${k.prefetches ? " (before the wait)" : ""}`,
    mb(Math.min(k.bytesInFlight, k.bytes)),
    us(k.bandwidthUs),
    us(k.computeUs),
    us(k.latencyUs),
    us(k.chainUs),
    us(k.kernelUs),
    k.bound,
  ]);
  return renderTable(columns, rows);
}

export interface StepCase {
  gpu: GpuName;
  plan: string;
  context: number;
  /** the step at the working estimates, and at both ends of their ranges */
  predict: (gpu: GpuModel) => PredictionRange;
}

const ranged = (mid: number | null, fast: number | null, slow: number | null) =>
  mid === null ? "–" : `${(mid / 1e3).toFixed(3)} (${(fast! / 1e3).toFixed(3)}-${(slow! / 1e3).toFixed(3)})`;

/** One row per case: launches, bytes floor, kernel sum (x floor), and the step in each mode, in ms with ranges. */
export function stepPredictionTable(cases: readonly StepCase[]): string {
  const columns = [
    "GPU",
    "plan",
    "context",
    "launches",
    "bytes floor ms",
    "kernel sum ms (x floor)",
    ...MODEL_MODES.map((m) => `${m} ms`),
  ].map((header) => ({ header }));
  const rows = cases.map((c) => {
    const gpu: GpuModel = GPU_MODELS[c.gpu];
    const { mid, fast, slow } = c.predict(gpu);
    return [
      gpu.name,
      c.plan,
      c.context,
      mid.kernels.length,
      (mid.bytesFloorUs / 1e3).toFixed(3),
      `${(mid.kernelSumUs / 1e3).toFixed(3)} (${(mid.kernelSumUs / mid.bytesFloorUs).toFixed(2)}x)`,
      ...MODEL_MODES.map((m) => ranged(mid.modes[m], fast.modes[m], slow.modes[m])),
    ];
  });
  return renderTable(columns, rows);
}

/** The model's parameters with their ranges and sources. */
export function parameterTable(): string {
  const columns = ["GPU", "parameter", "value", "range", "source"].map((header) => ({ header }));
  const rows = Object.values(GPU_MODELS).flatMap((g: GpuModel) =>
    (
      [
        ["bandwidth (GB/s)", g.bandwidth, 1e-9],
        ["fp32 (TFLOP/s)", g.flops, 1e-12],
        ["DRAM round trip (µs)", g.dramLatencyUs, 1],
        ["L2 round trip (µs)", g.l2LatencyUs, 1],
        ["eager host per launch (µs)", g.eagerHostUs, 1],
        ["native host per launch (µs)", g.nativeHostUs, 1],
        ["gap between kernels (µs)", g.graphNodeUs, 1],
        ["programmatic gap (µs)", g.pdlNodeUs, 1],
        ["persistent step's grid barrier (µs)", g.gridBarrierUs, 1],
      ] as const
    ).map(([name, e, scale]) => [
      g.name,
      name,
      e ? +(e.value * scale).toPrecision(3) : "none",
      e ? `${+(e.low * scale).toPrecision(3)}-${+(e.high * scale).toPrecision(3)}` : "–",
      e?.source ?? "no programmatic dependent launch before sm_90",
    ]),
  );
  return renderTable(columns, rows);
}

/** One step of a storage type and batch (weights and cache in `dtype`, `batch` sequences of one row). */
export interface LayoutCase {
  dtype: string;
  batch: number;
  predict: (gpu: GpuModel) => PredictionRange;
}

/**
 * One row per storage type and batch on one GPU: bytes floor, kernel sum, the graph, graph-pdl and persistent steps (with their
 * ranges) and per token, and how much of the kernel sum is in kernels bound by their arithmetic rather than memory.
 */
export function layoutPredictionTable(gpuName: GpuName, cases: readonly LayoutCase[]): string {
  const gpu: GpuModel = GPU_MODELS[gpuName];
  const columns = [
    "weights + cache",
    "batch",
    "bytes floor ms",
    "kernel sum ms (x floor)",
    "graph ms",
    "graph-pdl ms",
    "persistent ms",
    "graph ms per token",
    "compute-bound share",
  ].map((header) => ({ header }));
  const rows = cases.map((c) => {
    const { mid, fast, slow } = c.predict(gpu);
    const compute = mid.kernels.filter((k) => k.bound === "compute").reduce((s, k) => s + k.kernelUs, 0);
    return [
      c.dtype,
      c.batch,
      (mid.bytesFloorUs / 1e3).toFixed(3),
      `${(mid.kernelSumUs / 1e3).toFixed(3)} (${(mid.kernelSumUs / mid.bytesFloorUs).toFixed(2)}x)`,
      ranged(mid.modes.graph, fast.modes.graph, slow.modes.graph),
      ranged(mid.modes["graph-pdl"], fast.modes["graph-pdl"], slow.modes["graph-pdl"]),
      ranged(mid.modes.persistent, fast.modes.persistent, slow.modes.persistent),
      (mid.modes.graph! / 1e3 / c.batch).toFixed(4),
      `${Math.round((100 * compute) / mid.kernelSumUs)}%`,
    ];
  });
  return renderTable(columns, rows);
}
