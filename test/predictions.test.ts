// The kernel model's prediction beside each measured cached step (profile on a GPU the model knows): built
// here from the emulator's launchers (the same C launchers as the GPU's), and checked against the schema.
import { afterAll, describe, expect, test } from "bun:test";

import { CudaBackend } from "../src/backends/cuda.ts";
import { ALL_PRESETS } from "../src/model/architectures.ts";
import { PRESETS } from "../src/model/gpt2.ts";
import type { DtypeName } from "../src/ops.ts";
import { buildPredictions, gpuModelFor, measuredSteps } from "../src/profile/kernel-model/index.ts";
import type { InterventionsSection } from "../src/profile/types.ts";
import { renderReport } from "../src/report/markdown.ts";
import { validateSummary } from "../src/report/schema.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

const emu = CudaBackend.open({ emulated: true });
afterAll(() => emu.close());
const assumed = { facts: null, note: "assumed" };
const f32 = { dtype: "f32", kv_dtype: "f32", batch: 1, kv_heads: 12 } as const;

describe("the kernel model beside the measurements", () => {
  test("a GPU is modelled by its name; other devices are not", () => {
    expect(gpuModelFor("NVIDIA H200")).toBe("h200");
    expect(gpuModelFor("NVIDIA A40")).toBe("a40");
    expect(gpuModelFor("NVIDIA A100-SXM4-80GB")).toBeNull();
    expect(gpuModelFor("CPU emulation of CUDA")).toBeNull();
  });

  test("every cached point in a modelled mode gets its predicted step, with a range around it, and validates", () => {
    const summary = syntheticSummary();
    const cached = summary.points.filter((p) => p.mode !== "uncached");
    const p = buildPredictions(
      "h200",
      PRESETS.gpt2!,
      "fused",
      measuredSteps(summary.points, f32),
      emu.kernels,
      assumed,
      summary.device.launch,
    );
    expect(p.points.map((q) => [q.mode, q.context, q.dtype, q.batch])).toEqual(
      cached.map((q) => [q.mode, q.context, "f32", 1]),
    );
    for (const q of p.points) {
      expect(q.optimistic_ms).toBeLessThanOrEqual(q.predicted_ms);
      expect(q.predicted_ms).toBeLessThanOrEqual(q.pessimistic_ms);
      expect(q.measured_over_predicted).toBeCloseTo(q.measured_ms / q.predicted_ms, 12);
    }
    // graph replays cost less than eager launches by the model, at the same context
    const at = (mode: string) => p.points.find((q) => q.mode === mode && q.context === 32)!.predicted_ms;
    expect(at("graph")).toBeLessThan(at("eager"));
    expect(validateSummary({ ...summary, predictions: p })).toEqual([]);
  });

  test("the model's launch parameters stand beside this run's measurements of them (the A40 has no programmatic launch)", () => {
    const launch = syntheticSummary().device.launch;
    const p = buildPredictions("h200", PRESETS.gpt2!, "fused", [], emu.kernels, assumed, launch);
    expect(p.launch_parameters).toEqual([
      { parameter: "graph node gap", model_us: 1.0, low_us: 0.6, high_us: 2.0, measured_us: launch.graph_node_us },
      { parameter: "graph-pdl node gap", model_us: 0.4, low_us: 0.2, high_us: 0.8, measured_us: launch.pdl_node_us },
      {
        parameter: "grid barrier (persistent), blocks arriving at once",
        model_us: 0.7,
        low_us: 0.4,
        high_us: 2.0,
        measured_us: launch.grid_barrier_us,
      },
      {
        parameter: "grid barrier (persistent), skewed arrivals",
        model_us: 0.7,
        low_us: 0.4,
        high_us: 2.0,
        measured_us: launch.grid_barrier_skewed_us,
      },
    ]);
    const a40 = buildPredictions("a40", PRESETS.gpt2!, "fused", [], emu.kernels, assumed, {
      ...launch,
      pdl_node_us: null,
    });
    expect(a40.launch_parameters.map((r) => [r.parameter, r.measured_us])).toEqual([
      ["graph node gap", 0.8],
      ["grid barrier (persistent), blocks arriving at once", 0.7],
      ["grid barrier (persistent), skewed arrivals", 0.9],
    ]);
    const report = renderReport({ ...syntheticSummary(), predictions: p });
    expect(report).toContain("| grid barrier (persistent), blocks arriving at once | 0.70 | 0.4–2.0 | 0.70 |");
    expect(report).toContain("| grid barrier (persistent), skewed arrivals | 0.70 | 0.4–2.0 | 0.90 |");
    expect(report).toContain("| graph-pdl node gap | 0.40 | 0.2–0.8 | 0.50 |");
  });

  test("per op family the model's kernels stand beside the traced ones, only where the kernels did not overlap (not graph-pdl)", () => {
    const summary = syntheticSummary();
    const families = new Map([
      ["ln_qkv", 0.03],
      ["attention", 0.01],
    ]);
    const traced = [
      { mode: "graph", context: 32, familyMs: families, overlappingOps: 0 },
      { mode: "graph-pdl", context: 32, familyMs: families, overlappingOps: 61 },
    ];
    const p = buildPredictions(
      "h200",
      PRESETS.gpt2!,
      "fused",
      [],
      emu.kernels,
      assumed,
      summary.device.launch,
      traced,
      f32,
    );
    expect(p.kernels.map((k) => [k.mode, k.context, k.family, k.calls])).toEqual([
      ["graph", 32, "ln_qkv", 12],
      ["graph", 32, "attention", 12],
    ]);
    for (const k of p.kernels) {
      expect(k.optimistic_us).toBeLessThanOrEqual(k.predicted_us);
      expect(k.predicted_us).toBeLessThanOrEqual(k.pessimistic_us);
      expect(k.measured_over_predicted).toBeCloseTo(k.measured_us / k.predicted_us, 12);
    }
    expect(p.kernels[0]!.measured_us).toBeCloseTo(30, 9);
    expect(p.kernels_how).toContain("not in graph-pdl");
    expect(validateSummary({ ...summary, predictions: p })).toEqual([]);
    const report = renderReport({ ...summary, predictions: p });
    expect(report).toMatch(/\| graph \| 32 \| ln_qkv \| 12 \| 30\.00 \|/);
  });

  test("the interventions' steps join the study's, except the one that repeats the study's own configuration and mode", () => {
    const summary = syntheticSummary();
    const step = (dtype: DtypeName, batch: number, context: number, ms: number, kv_heads = 12) => ({
      dtype,
      kv_dtype: dtype,
      batch,
      kv_heads,
      context,
      step_ms: { median: ms },
    });
    const interventions = {
      mode: "graph",
      points: [step("f32", 1, 32, 9), step("bf16", 1, 32, 5), step("f32", 4, 32, 12), step("f32", 1, 32, 7, 4)],
    } as unknown as InterventionsSection;
    const steps = measuredSteps(summary.points, f32, interventions);
    const cached = summary.points.filter((q) => q.mode !== "uncached");
    expect(steps).toHaveLength(cached.length + 3);
    expect(steps.slice(cached.length)).toEqual([
      { dtype: "bf16", kv_dtype: "bf16", batch: 1, kv_heads: 12, mode: "graph", context: 32, measured_ms: 5 },
      { dtype: "f32", kv_dtype: "f32", batch: 4, kv_heads: 12, mode: "graph", context: 32, measured_ms: 12 },
      { dtype: "f32", kv_dtype: "f32", batch: 1, kv_heads: 4, mode: "graph", context: 32, measured_ms: 7 },
    ]);
  });

  test("every intervention's step is predicted at its own storage types and batch: bf16 halves the bytes, a batch shares the weights", () => {
    const at = (dtype: DtypeName, batch: number, mode = "graph") => ({
      dtype,
      kv_dtype: dtype,
      batch,
      kv_heads: 12,
      mode,
      context: 512,
      measured_ms: 1,
    });
    const steps = [at("f32", 1), at("bf16", 1), at("f32", 4), at("f32", 1, "uncached")];
    const p = buildPredictions(
      "h200",
      PRESETS.gpt2!,
      "fused",
      steps,
      emu.kernels,
      assumed,
      syntheticSummary().device.launch,
    );
    expect(p.points.map((q) => [q.dtype, q.batch])).toEqual([
      ["f32", 1],
      ["bf16", 1],
      ["f32", 4],
    ]);
    const [f32One, bf16One, f32Four] = p.points.map((q) => q.predicted_ms) as [number, number, number];
    expect(bf16One).toBeLessThan(0.75 * f32One);
    expect(f32Four).toBeGreaterThan(f32One);
    expect(f32Four).toBeLessThan(2 * f32One);
  });

  test("a K/V-head variant is predicted at its own shape: at a long context fewer K/V heads read fewer cache bytes", () => {
    const at = (kv_heads: number) => ({
      dtype: "bf16" as const,
      kv_dtype: "bf16" as const,
      batch: 1,
      kv_heads,
      mode: "graph",
      context: 8191,
      measured_ms: 1,
    });
    const p = buildPredictions(
      "h200",
      ALL_PRESETS["smollm2-135m"]!,
      "fused",
      [at(9), at(3), at(1)],
      emu.kernels,
      assumed,
      syntheticSummary().device.launch,
    );
    expect(p.points.map((q) => q.kv_heads)).toEqual([9, 3, 1]);
    const [mha, gqa, mqa] = p.points.map((q) => q.predicted_ms) as [number, number, number];
    expect(gqa).toBeLessThan(mha);
    expect(mqa).toBeLessThan(gqa);
  });
});
