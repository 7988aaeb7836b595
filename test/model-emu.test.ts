// The whole model through the CUDA library's own code on the CPU emulator (libgpt2_emu.so): kernels,
// host runtime, graph capture (plain and programmatic) and replay, in both plans. Same checks as
// `bun run verify` runs without a GPU; and gpt2-tiny reshaped to grouped-query attention against the CPU library.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import type { Backend } from "../src/backends/backend.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import { CudaBackend } from "../src/backends/cuda.ts";
import { loadModel, randomWeights } from "../src/model/gpt2.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, type PlanKind, type StepForm } from "../src/plan.ts";
import { generate, generateBatch } from "../src/run/generate.ts";
import { availableModes, launchMode, modeForm, persistentStepRefusal, type ModeForm } from "../src/run/launch-modes.ts";
import { Session } from "../src/run/session.ts";
import { maxRelativeError } from "../src/verify/compare.ts";
import {
  cachedEqualsUncached,
  fixtureChecks,
  graphMemoryStable,
  LOGIT_TOLERANCE,
  modesBitIdentical,
  plansAgree,
  readFixture,
} from "../src/verify/model-checks.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
/** The emulator runs every CUDA thread as a fiber: ~20 s per test alone, several times that on busy cores. */
const EMU_TIMEOUT_MS = 600_000;
const emu = CudaBackend.open({ emulated: true });
const cpu = CpuBackend.open();
const weights = loadModel(FIXTURE);
const fixture = readFixture(FIXTURE);
afterAll(() => {
  emu.close();
  cpu.close();
});

test("the emulator has every launch mode; the persistent step needs the fused plan, the cache in the weights' type and heads its attention body holds", () => {
  const names = (plan: PlanKind, kv: "f32" | "bf16", headDim = 64, rotary = false) =>
    availableModes(emu, { plan, weights: "f32", kv, headDim, rotary }).map((m) => m.name);
  const perOp = ["eager", "eager-native", "graph", "graph-pdl"];
  expect(names("fused", "f32")).toEqual([...perOp, "persistent"]);
  expect(names("unfused", "f32")).toEqual(perOp);
  expect(names("fused", "bf16")).toEqual(perOp);
  const widest = emu.kernels!.facts.attention.maxHeadSize;
  expect(names("fused", "f32", widest)).toContain("persistent");
  expect(names("fused", "f32", widest + 16)).toEqual(perOp);
  // a rotated head's row must fill whole 128-byte tiles: f32 heads of 32, 64, 96, 128, not 16, 48, 80, 112
  expect(
    [16, 32, 48, 64, 80, 96, 112, 128].filter((d) => names("fused", "f32", d, true).includes("persistent")),
  ).toEqual([32, 64, 96, 128]);
  expect(names("fused", "f32", 48)).toContain("persistent"); // GPT-2's q/k/v body has no rotation
  const bf16 = (headDim: number) =>
    availableModes(emu, { plan: "fused", weights: "bf16", kv: "bf16", headDim, rotary: true }).map((m) => m.name);
  expect([32, 64, 96, 128].filter((d) => bf16(d).includes("persistent"))).toEqual([64, 128]);
  // and a refusal says which of the four it is
  const refusal = (form: Partial<ModeForm>) =>
    persistentStepRefusal(
      { plan: "fused", weights: "f32", kv: "f32", headDim: 64, rotary: true, ...form },
      emu.persistentStep!,
    );
  expect(refusal({})).toBeNull();
  expect(refusal({ plan: "unfused" })).toBe("the persistent step runs the fused plan only");
  expect(refusal({ kv: "bf16" })).toBe("the persistent step holds the cache in the weights' storage type only");
  expect(refusal({ headDim: widest + 16 })).toBe(`the persistent step's attention body holds heads of up to ${widest}`);
  expect(refusal({ headDim: 48 })).toBe(
    "the persistent step's rotating q/k/v body needs a head's row in whole 128-byte tiles, and a f32 head of 48 is 192 bytes",
  );
});

test.each(PLAN_KINDS.map((p) => [p]))(
  "gpt2-tiny logits and greedy continuation in every launch mode and uncached, %s plan",
  (plan) => {
    const rows = fixtureChecks(emu, weights, fixture, plan);
    expect(rows.map((r) => `${r.check} ${r.detail}: ${r.status}`)).toEqual(
      rows.map((r) => `${r.check} ${r.detail}: pass`),
    );
    expect(rows).toHaveLength(plan === "fused" ? 7 : 6); // logits, a greedy row per launch mode (persistent: fused only), uncached
  },
  EMU_TIMEOUT_MS,
);

test.each(PLAN_KINDS.map((p) => [p]))(
  "the launch modes agree bit for bit, and the cache is exact, over every position, %s plan",
  (plan) => {
    const n = weights.config.n_positions - fixture.prompt.length;
    expect(modesBitIdentical(emu, weights, fixture.prompt, n, plan).status).toBe("pass");
    expect(cachedEqualsUncached(emu, weights, fixture.prompt, n, plan).status).toBe("pass");
  },
  EMU_TIMEOUT_MS,
);

test(
  "the fused and unfused plans agree",
  () => {
    expect(plansAgree(emu, weights, fixture.prompt, weights.config.n_positions - fixture.prompt.length).status).toBe(
      "pass",
    );
  },
  EMU_TIMEOUT_MS,
);

test("a fused decode step is 5 kernels per layer plus 2 in both graphs; the unfused one 11 plus 4", () => {
  for (const [plan, perLayer, outside] of [
    ["fused", 5, 2],
    ["unfused", 11, 4],
  ] as const) {
    const s = new Session(emu, weights, { form: { ...DEFAULT_STEP_FORM, plan } });
    try {
      const native = s.step(1).native();
      const kernels = weights.config.n_layer * perLayer + outside;
      expect(native.graphKernelNodes!("plain")).toBe(kernels);
      expect(native.graphKernelNodes!("programmatic")).toBe(kernels);
      if (plan === "fused") expect(native.graphKernelNodes!("persistent")).toBe(1);
      else expect(() => native.graphKernelNodes!("persistent")).toThrow(/the persistent step runs the fused plan/);
    } finally {
      s.close();
    }
  }
});

test(
  "graph replays allocate nothing",
  () => {
    expect(graphMemoryStable(emu, weights, 20).status).toBe("pass");
  },
  EMU_TIMEOUT_MS,
);

/** Generates from each prompt in one session of `form` (as many sequences as prompts); the tokens per sequence. */
function tokensOf(form: StepForm, prompts: number[][], mode: string, maxNewTokens: number): number[][] {
  const s = new Session(emu, weights, { form });
  try {
    return generateBatch(s, { prompts, maxNewTokens, cache: true, mode: launchMode(mode as "eager") }).generatedIds;
  } finally {
    s.close();
  }
}

test.each(PLAN_KINDS.flatMap((plan) => (["f32", "bf16", "f16"] as const).map((dtype) => [plan, dtype] as const)))(
  "a batch of 3 sequences gives each the tokens it gets alone, in every launch mode (%s plan, weights and cache %s)",
  (plan, dtype) => {
    const prompts = [fixture.prompt, [5, 9, 2], [7, 3, 1, 4, 1, 5, 9, 2, 6, 5]]; // prefills of 1..8 rows and over 8
    const alone = prompts.map((p) => tokensOf({ plan, batch: 1, weights: dtype, kv: dtype }, [p], "eager", 6)[0]!);
    for (const mode of availableModes(emu, modeForm({ plan, weights: dtype, kv: dtype }, weights.config)).map(
      (m) => m.name,
    ))
      expect([mode, tokensOf({ plan, batch: 3, weights: dtype, kv: dtype }, prompts, mode, 6)]).toEqual([mode, alone]);
  },
  EMU_TIMEOUT_MS,
);

describe("gpt2-tiny reshaped to grouped-query attention: 4 query heads of 32 sharing 2 K/V heads, seeded", () => {
  const gqa = randomWeights({ ...weights.config, name: "gpt2-tiny-gqa", n_head: 4, n_kv_head: 2 }, 3);
  const n = 24;
  /** n cached tokens after the fixture's prompt, and the last step's logits */
  const cached = (backend: Backend, plan: PlanKind, mode: string) => {
    const s = new Session(backend, gqa, { form: { ...DEFAULT_STEP_FORM, plan } });
    try {
      const ids = generate(s, {
        prompt: fixture.prompt,
        maxNewTokens: n,
        cache: true,
        mode: launchMode(mode as "eager"),
      }).generatedIds;
      return { ids, logits: s.readLogits().slice() };
    } finally {
      s.close();
    }
  };

  test.each(PLAN_KINDS.map((p) => [p]))(
    "%s plan: the CPU library's tokens and last logits in every launch mode, cached == uncached",
    (plan) => {
      const want = cached(cpu, plan, "eager");
      const modes = availableModes(emu, modeForm({ ...DEFAULT_STEP_FORM, plan }, gqa.config)).map((m) => m.name);
      expect(modes).toContain(plan === "fused" ? "persistent" : "graph-pdl");
      for (const mode of modes) {
        const got = cached(emu, plan, mode);
        expect([mode, got.ids]).toEqual([mode, want.ids]);
        expect(maxRelativeError(got.logits, want.logits)).toBeLessThanOrEqual(LOGIT_TOLERANCE);
      }
      expect(cachedEqualsUncached(emu, gqa, fixture.prompt, n, plan).status).toBe("pass");
    },
    EMU_TIMEOUT_MS,
  );
});
