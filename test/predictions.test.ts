// The kernel model's prediction beside each measured cached point (profile on a GPU the model knows): built
// here from the emulator's launchers (the same C launchers as the GPU's), and checked against the schema.
import { afterAll, describe, expect, test } from "bun:test";

import { CudaBackend } from "../src/backends/cuda.ts";
import { PRESETS } from "../src/model/config.ts";
import { encodePlan } from "../src/plan.ts";
import { buildPredictions, gpuModelFor } from "../src/profile/predictions.ts";
import { validateSummary } from "../src/report/schema.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

const emu = CudaBackend.open({ emulated: true });
afterAll(() => emu.close());

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
    const p = buildPredictions("h200", PRESETS.gpt2!, "fused", summary.points, (ops) => emu.kernels.launchShapes(encodePlan(ops)), { facts: null, note: "assumed" });
    expect(p.points.map((q) => [q.mode, q.context])).toEqual(cached.map((q) => [q.mode, q.context]));
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
});
