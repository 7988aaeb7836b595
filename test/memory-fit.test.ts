// What a session allocates, known before it allocates (Session.placementBytes), and the largest context a run
// fits (run/memory-fit.ts): the sizes equal what placing allocates, for GPT-2 and a Llama-family model at several
// contexts, batches and storage types; the largest context found is the last one whose need fits, to the position.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { ALL_PRESETS, loadAnyModel, type ModelWeights } from "../src/model/architectures.ts";
import { randomWeights } from "../src/model/gpt2.ts";
import type { StepForm } from "../src/plan.ts";
import { largestContextByBatch, largestFittingContext, runNeed, type RunPlacement } from "../src/run/memory-fit.ts";
import { placementTotal } from "../src/run/model-buffers.ts";
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
