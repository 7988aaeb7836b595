// CUPTI records → traced steps (src/backends/cuda-instrument.ts stepsFromCupti), the GPU path of the profiler's
// breakdown, proven on synthetic records since no GPU is here: kernels matched to the plan by position and
// family, launch calls inside the host window, broken records dropped and counted, gaps flagged.
import { describe, expect, test } from "bun:test";

import type { RawApiRecord, RawKernelRecord } from "../src/native/cupti.ts";
import { stepsFromCupti } from "../src/backends/cuda-instrument.ts";
import type { OpFamily } from "../src/ops.ts";
import type { PlanOp } from "../src/plan.ts";

const FAMILIES: OpFamily[] = ["embed", "layernorm", "linear", "gelu", "argmax"];
const KERNEL_NAMES = [
  "embed_kernel",
  "layernorm_kernel",
  "void linear_matvec_kernel<4>(float*, float const*)",
  "gelu_kernel",
  "argmax_kernel",
];
const noWork = () => ({ flops: 0, bytes: 0, weight_bytes: 0, kv_bytes: 0 });
const ops: PlanOp[] = FAMILIES.map((family, i) => ({
  family,
  label: `${family}.${i}`,
  layer: i === 0 ? null : 0,
  args: [],
  work: noWork,
  output: null,
}));

function kernel(name: string, start: number, end: number, correlation: number): RawKernelRecord {
  return {
    start_ns: start,
    end_ns: end,
    correlation,
    stream: 7,
    graph_id: 0,
    graph_node_id: 0n,
    grid: [1, 1, 1],
    block: [256, 1, 1],
    registers: 32,
    static_shared_bytes: 128,
    dynamic_shared_bytes: 0,
    name,
  };
}

function launch(start: number, end: number, correlation: number): RawApiRecord {
  return {
    start_ns: start,
    end_ns: end,
    correlation,
    cbid: 211,
    domain: "runtime",
    return_value: 0,
    process_id: 1,
    thread_id: 1,
    name: "cudaLaunchKernel",
  };
}

/** One eager step from t0: five launches of 2 µs, each kernel starting 1 µs after its launch and running 3 µs. */
function eagerStep(t0: number, correlation0: number) {
  const launches = KERNEL_NAMES.map((_, i) => launch(t0 + i * 4000, t0 + i * 4000 + 2000, correlation0 + i));
  const kernels = KERNEL_NAMES.map((name, i) =>
    kernel(name, t0 + i * 4000 + 3000, t0 + i * 4000 + 6000, correlation0 + i),
  );
  return { launches, kernels, window: [t0, t0 + 20_000] as [number, number] };
}

describe("stepsFromCupti", () => {
  const a = eagerStep(1_000_000, 100);
  const b = eagerStep(2_000_000, 200);

  test("two clean steps: ops in plan order with kernel names, launch calls on the host, microseconds", () => {
    const r = stepsFromCupti(
      [a.window, b.window],
      [...b.kernels, ...a.kernels],
      [...a.launches, ...b.launches],
      0,
      ops,
      "eager",
    );
    expect(r.mismatchedSteps).toEqual([]);
    expect(r.dropped).toBe(0);
    expect(r.steps).toHaveLength(2);
    const first = r.steps[0]!;
    expect(first.ops.map((o) => o.family)).toEqual(FAMILIES);
    expect(first.ops[2]!.name).toBe("void linear_matvec_kernel<4>");
    expect(first.ops[0]!).toMatchObject({
      start_us: 1003,
      end_us: 1006,
      correlation: 100,
      registers: 32,
      shared_bytes: 128,
      label: "embed.0",
      layer: null,
    });
    expect(first.host.filter((h) => h.kind === "launch").map((h) => h.correlation)).toEqual([100, 101, 102, 103, 104]);
    expect(first.host[0]).toMatchObject({ kind: "step", start_us: 1000, end_us: 1020 });
    expect(r.steps[1]!.ops[0]!.correlation).toBe(200);
  });

  test("a kernel CUPTI delivered with its end before its start is dropped, counted, and its step flagged", () => {
    const broken = [...a.kernels];
    broken[3] = { ...broken[3]!, end_ns: broken[3]!.start_ns - 5 };
    const r = stepsFromCupti([a.window], broken, a.launches, 2, ops, "eager");
    expect(r.dropped).toBe(3);
    expect(r.mismatchedSteps).toEqual([0]);
  });

  test("a kernel of the wrong family at a position flags the step instead of mislabelling it", () => {
    const swapped = [...a.kernels];
    swapped[1] = { ...swapped[1]!, name: "gelu_kernel" };
    expect(stepsFromCupti([a.window], swapped, a.launches, 0, ops, "eager").mismatchedSteps).toEqual([0]);
  });

  test("graph replay: kernels run after the host window closed still belong to their step", () => {
    const t0 = 5_000_000;
    const window: [number, number] = [t0, t0 + 3000]; // one cudaGraphLaunch returns fast
    const kernels = KERNEL_NAMES.map((name, i) => kernel(name, t0 + 10_000 + i * 3000, t0 + 12_000 + i * 3000, 900));
    const r = stepsFromCupti(
      [window],
      kernels,
      [{ ...launch(t0 + 500, t0 + 2500, 900), name: "cudaGraphLaunch" }],
      0,
      ops,
      "graph",
    );
    expect(r.mismatchedSteps).toEqual([]);
    expect(r.steps[0]!.ops).toHaveLength(5);
    expect(r.steps[0]!.host.map((h) => h.name)).toEqual(["step (graph)", "cudaGraphLaunch"]);
  });
});
