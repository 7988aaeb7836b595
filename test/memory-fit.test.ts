// What a session allocates, known before it allocates (Session.placementBytes), and the largest context a run
// fits (run/memory-fit.ts): the sizes equal what placing allocates, for GPT-2 and a Llama-family model at several
// contexts, batches and storage types; the largest context found is the last one whose need fits, to the position.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { ALL_PRESETS, loadAnyModel, type ModelWeights } from "../src/model/architectures.ts";
import { randomWeights } from "../src/model/gpt2.ts";
import type { StepForm } from "../src/plan.ts";
import {
  groupsFitTogether,
  memoryBytes,
  narrowerWeights,
  largestContextByBatch,
  largestFittingContext,
  runNeed,
  type RunPlacement,
} from "../src/run/memory-fit.ts";
import { placedForms } from "../src/profile/interventions.ts";
import type { Backend, DeviceBuffer } from "../src/backends/backend.ts";
import { PlacedWeights, placementTotal } from "../src/run/model-buffers.ts";
import { generateBatch } from "../src/run/generate.ts";
import { launchMode } from "../src/run/launch-modes.ts";
import { Session } from "../src/run/session.ts";

const cpu = CpuBackend.open();
afterAll(() => cpu.close());

const gpt2 = randomWeights({
  name: "gpt2-fit",
  n_layer: 2,
  n_head: 2,
  n_embd: 64,
  n_positions: 96,
  vocab_size: 97,
  layer_norm_epsilon: 1e-5,
});
const MODELS: [string, ModelWeights][] = [
  ["gpt2", gpt2],
  ["llama-tiny", loadAnyModel(join(import.meta.dir, "fixtures/llama-tiny"))],
];
const form = (batch: number, weights: StepForm["weights"], kv: StepForm["kv"]): StepForm => ({
  plan: "fused",
  batch,
  weights,
  kv,
});

describe("placementBytes is what placing allocates", () => {
  for (const [name, weights] of MODELS)
    for (const [f, maxContext] of [
      [form(1, "f32", "f32"), 40],
      [form(3, "bf16", "f16"), 77],
      [form(2, "f16", "bf16"), undefined],
    ] as const)
      test(`${name}, batch ${f.batch}, ${f.weights}/${f.kv}, context ${maxContext ?? "the model's"}`, () => {
        const opts = { form: f, ...(maxContext ? { maxContext } : {}) };
        const bytes = Session.placementBytes(cpu, weights.config, opts);
        const s = new Session(cpu, weights, opts);
        try {
          const a = s.resident.allocations;
          expect(bytes).toEqual({ weights: a.weights.bytes, cache: a.cache.bytes, activations: a.activations.bytes });
          // the activations' regions tile their allocation
          const regions = Object.values(s.resident.activationRegions);
          expect(regions.reduce((sum, r) => sum + r.bytes, 0)).toBe(a.activations.bytes);
        } finally {
          s.close();
        }
      });
});

describe("the largest context a run fits", () => {
  const smollm = ALL_PRESETS["smollm2-135m"]!;
  const run: RunPlacement = { study: { config: smollm, form: form(1, "f32", "f32") }, groups: [] };
  const needAt = (context: number) => placementTotal(runNeed(cpu, run, context + 1));

  test("is the last context whose need fits, for a budget between two contexts' needs", () => {
    for (const target of [1, 1000, 4095, smollm.n_positions - 2]) {
      const free = needAt(target) + (needAt(target + 1) - needAt(target)) / 2;
      expect(largestFittingContext(cpu, run, free)).toBe(target);
    }
  });

  test("is the model's limit when everything fits, and 0 when not one position does", () => {
    expect(largestFittingContext(cpu, run, 1e15)).toBe(smollm.n_positions - 1);
    expect(largestFittingContext(cpu, run, needAt(0) - 1)).toBe(0);
  });

  test("a group placed beside the study (another K/V-head variant) lowers it; batches lower it", () => {
    const free = needAt(6000);
    const variant = { ...smollm, n_kv_head: 9 };
    const withGroup: RunPlacement = { ...run, groups: [[{ config: variant, form: form(1, "f32", "f32") }]] };
    expect(largestFittingContext(cpu, withGroup, free)).toBeLessThan(6000);
    const byBatch = largestContextByBatch(cpu, run.study, free);
    expect(byBatch[0]).toEqual({ batch: 1, context: 6000 });
    for (let i = 1; i < byBatch.length; i++) expect(byBatch[i]!.context).toBeLessThan(byBatch[i - 1]!.context);
  });
});

describe("K/V-head variants placed together or one at a time", () => {
  const smollm = ALL_PRESETS["smollm2-135m"]!;
  const f32 = form(1, "f32", "f32");
  const study = { config: smollm, form: f32 };
  const groups = [3, 1].map((kv) => [{ config: { ...smollm, n_kv_head: kv }, form: f32 }]);
  const run: RunPlacement = { study, groups };
  const bytes = (p: RunPlacement["study"]) =>
    placementTotal(Session.placementBytes(cpu, p.config, { form: p.form, maxContext: 2048 }));

  test("together, the run holds every variant at once beside the study; apart, the largest", () => {
    const apart = placementTotal(runNeed(cpu, run, 2048));
    const together = placementTotal(runNeed(cpu, { ...run, together: true }, 2048));
    expect(apart).toBe(bytes(study) + Math.max(...groups.map((g) => bytes(g[0]!))));
    expect(together).toBe(bytes(study) + bytes(groups[0]![0]!) + bytes(groups[1]![0]!));
  });

  test("they go together where all of them take at most the share of what is usable beside the study", () => {
    const all = bytes(groups[0]![0]!) + bytes(groups[1]![0]!);
    const usable = bytes(study) + 2 * all; // half of what is left is exactly all of them
    expect(groupsFitTogether(cpu, run, 2048, usable, 0.5)).toBe(true);
    expect(groupsFitTogether(cpu, run, 2048, usable - 2, 0.5)).toBe(false);
  });
});

describe("sessions of the same weights stored alike share one placement of them", () => {
  const [, llama] = MODELS[1]!;
  const prompts = [
    [3, 14, 15, 92, 65],
    [2, 7, 18],
  ];
  const decode = (s: Session<ModelWeights>) =>
    generateBatch(s, { prompts, maxNewTokens: 6, cache: true, mode: launchMode("eager") }).generatedIds;

  test("a batch-2 session reads a batch-1 session's weights, decodes as alone, and outlives it", () => {
    const alone = new Session(cpu, llama, { form: form(2, "bf16", "f32"), maxContext: 64 });
    const expected = decode(alone);
    alone.close();
    const lender = new Session(cpu, llama, { form: form(1, "bf16", "f32"), maxContext: 64 });
    const reader = new Session(cpu, llama, { form: form(2, "bf16", "f32"), maxContext: 48, weightsFrom: lender });
    try {
      expect(reader.resident.parameters).toEqual(lender.resident.parameters);
      expect(reader.resident.weights).toBe(lender.resident.weights);
      lender.close(); // the reader still holds them
      expect(decode(reader)).toEqual(expected);
    } finally {
      reader.close();
    }
  });

  test("a reader closed twice releases its hold once: the lender's weights stay", () => {
    const lender = new Session(cpu, llama, { form: form(2, "f32", "f32"), maxContext: 64 });
    try {
      const expected = decode(lender);
      const reader = new Session(cpu, llama, { form: form(1, "f32", "f32"), maxContext: 64, weightsFrom: lender });
      reader.close();
      reader.close();
      expect(decode(lender)).toEqual(expected);
    } finally {
      lender.close();
    }
  });

  test("lendsWeights: not to another storage type, other weights, or more positions than its table covers", () => {
    const lender = new Session(cpu, llama, { form: form(1, "f32", "f32"), maxContext: 40 });
    try {
      expect(lender.lendsWeights(cpu, llama, form(4, "f32", "bf16"), 40)).toBe(true);
      expect(lender.lendsWeights(cpu, llama, form(1, "bf16", "f32"), 40)).toBe(false);
      expect(
        lender.lendsWeights(cpu, loadAnyModel(join(import.meta.dir, "fixtures/llama-tiny")), form(1, "f32", "f32"), 40),
      ).toBe(false);
      expect(lender.lendsWeights(cpu, llama, form(1, "f32", "f32"), 41)).toBe(false);
      expect(
        () => new Session(cpu, llama, { form: form(1, "bf16", "f32"), maxContext: 40, weightsFrom: lender }),
      ).toThrow(/Session.lendsWeights/);
    } finally {
      lender.close();
    }
  });

  test("PlacedWeights frees its buffer with the last session that holds it, once", () => {
    const freed: DeviceBuffer[] = [];
    const backend = { free: (b: DeviceBuffer) => freed.push(b) } as unknown as Backend;
    const buffer = { ptr: 4096, bytes: 256 };
    const placed = new PlacedWeights(backend, buffer, 8);
    expect(placed.hold()).toBe(placed);
    placed.release();
    expect(freed).toEqual([]);
    placed.release();
    expect(freed).toEqual([buffer]);
  });

  test("an intervention's forms place weights once per storage type, none where the study's session holds them", () => {
    const study = { weights: llama, form: form(1, "f32", "f32") };
    const forms = [form(1, "f32", "f32"), form(2, "f32", "f32"), form(1, "bf16", "bf16"), form(2, "bf16", "bf16")];
    const placed = (w: ModelWeights) =>
      placedForms(w, forms, study).map((p) => [p.form.batch, p.form.weights, p.ownWeights]);
    expect(placed(llama)).toEqual([
      [2, "f32", false],
      [1, "bf16", true],
      [2, "bf16", false],
    ]);
    const variant = randomWeights({ ...gpt2.config, name: "another" });
    expect(placed(variant)).toEqual([
      [1, "f32", true],
      [2, "f32", false],
      [1, "bf16", true],
      [2, "bf16", false],
    ]);
  });

  test("runNeed counts a session that reads another's weights without them", () => {
    const study = { config: llama.config, form: form(1, "f32", "f32") };
    const beside = { config: llama.config, form: form(4, "f32", "f32") };
    const own = runNeed(cpu, { study, groups: [[beside]] }, 64);
    const reading = runNeed(cpu, { study, groups: [[{ ...beside, ownWeights: false }]] }, 64);
    const placed = Session.placementBytes(cpu, llama.config, { form: beside.form, maxContext: 64 });
    expect(own.weights - reading.weights).toBe(placed.weights);
    expect(reading.cache).toBe(own.cache);
    expect(reading.activations).toBe(own.activations);
  });
});

describe("resident bytes (CpuBackend.residentBytes, mincore)", () => {
  const PAGE = 4096;
  test("of a cache are the pages its written rows touch, not what was allocated", () => {
    const [, llama] = MODELS[1]!;
    const s = new Session(cpu, llama, { form: form(1, "f32", "f32"), maxContext: 128 });
    try {
      const cache = s.resident.allocations.cache;
      expect(cpu.residentBytes(cache.ptr, cache.bytes)).toBe(0); // be_alloc's pages are committed on first write
      const rows = 20;
      s.prefill(Array.from({ length: rows }, (_, i) => (7 * i + 3) % llama.config.vocab_size));
      const perRow = cache.bytes / (2 * llama.config.n_layer * 128); // one layer's K (or V) row
      const segments = 2 * llama.config.n_layer;
      const touched = segments * Math.ceil((rows * perRow) / PAGE) * PAGE; // each segment starts on a page
      expect(cpu.residentBytes(cache.ptr, cache.bytes)).toBe(touched);
      expect(touched).toBeLessThan(cache.bytes / 2);
    } finally {
      s.close();
    }
  });

  test("of a range count its pages whole, from the page it starts in", () => {
    const b = cpu.alloc(16 * PAGE);
    try {
      cpu.fill32({ ptr: b.ptr + 5 * PAGE, bytes: 8 }, 1, 2); // one word pair in page 5
      expect(cpu.residentBytes(b.ptr, b.bytes)).toBe(PAGE);
      expect(cpu.residentBytes(b.ptr + 5 * PAGE + 100, 8)).toBe(PAGE);
      expect(cpu.residentBytes(b.ptr + 4 * PAGE, PAGE)).toBe(0);
      expect(cpu.residentBytes(b.ptr + 4 * PAGE + 1, PAGE)).toBe(PAGE);
    } finally {
      cpu.free(b);
    }
  });
});

test("memory lines give bytes in the unit that shows them: GB, MB or kB", () => {
  expect(memoryBytes(4_943_257_600)).toBe("4.94 GB");
  expect(memoryBytes(3_418_112)).toBe("3.4 MB");
  expect(memoryBytes(131_072)).toBe("131.1 kB");
  expect(memoryBytes(999_999_999)).toBe("1.00 GB"); // not "1000.0 MB"
  expect(memoryBytes(999_999)).toBe("1.0 MB");
});

test("weights that alone do not fit: narrower storage only where some are f32", () => {
  expect(narrowerWeights(["f32"], "--dtype bf16")).toBe("store the weights narrower (--dtype bf16)");
  expect(narrowerWeights(["bf16", "f32"], "--dtypes bf16, without f32")).toMatch(/without f32/);
  // bf16 given already: no advice to give bf16
  expect(narrowerWeights(["bf16"], "--dtypes bf16, without f32")).toBe(
    "the weights are already 2 bytes a parameter: take a smaller --preset or --model",
  );
  expect(narrowerWeights(["f16", "bf16"], "--dtype bf16")).not.toMatch(/--dtype/);
});
