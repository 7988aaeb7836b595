// The whole model on the CPU backend: the gpt2-tiny fixture (an independent float64 numpy GPT-2), the
// exactness of the KV cache, and mutants of the cache logic that these tests must catch.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { loadModel } from "../src/model/weights.ts";
import { ensureBuilt } from "../src/native/build.ts";
import { compileEager, decodeStep, type PlanOp } from "../src/plan.ts";
import { generate } from "../src/run/generate.ts";
import { launchMode } from "../src/run/launch-modes.ts";
import { Session } from "../src/run/session.ts";
import { readFixture } from "../src/verify/model-checks.ts";
import { maxRelativeError } from "./helpers/reference.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const expected = readFixture(FIXTURE);
const expectedLogits = expected.logits;
const weights = loadModel(FIXTURE);
const V = weights.config.vocab_size;

const backend = CpuBackend.open();
const session = new Session(backend, weights);
afterAll(() => {
  session.close();
  backend.close();
});

describe("gpt2-tiny fixture on the CPU backend", () => {
  test("logits at every position within 1e-4 of the float64 reference (relative to the largest |logit|)", () => {
    const logits = session.logitsAtEveryPosition(expected.sequence);
    expect(logits.length).toBe(expectedLogits.length);
    expect(maxRelativeError(logits, expectedLogits)).toBeLessThan(1e-4);
  });

  test.each([
    [true, "eager"], [true, "eager-native"], [false, "eager"],
  ] as const)("48-token greedy continuation identical (cache %p, mode %s)", (cache, mode) => {
    const r = generate(session, { prompt: expected.prompt, maxNewTokens: expected.generated.length, cache, mode: launchMode(mode) });
    expect(r.generatedIds).toEqual(expected.generated);
  });
});

/** Greedy decode with the cache where each T=1 step's plan may be mutated; returns the generated ids. */
function decodeWithStep(s: Session, prompt: number[], n: number, mutate: (ops: PlanOp[]) => PlanOp[] = (o) => o): number[] {
  s.prefill(prompt);
  const calls = compileEager(mutate(decodeStep(s.resident.buffers, 1)), s.backend.ops);
  for (let i = 1; i < n; i++) for (const call of calls) call();
  return s.readSequence(prompt.length + n).slice(prompt.length);
}

function uncachedIds(s: Session, prompt: number[], n: number): number[] {
  return generate(s, { prompt, maxNewTokens: n, cache: false, mode: launchMode("eager") }).generatedIds;
}

describe("KV cache exactness", () => {
  const prompt = expected.prompt;
  const N = 56; // ≥ 40 tokens, within n_positions = 64

  test(`cached == uncached greedy tokens over ${N} tokens, and their logits within 1e-5`, () => {
    const cached = decodeWithStep(session, prompt, N);
    expect(cached).toEqual(uncachedIds(session, prompt, N));
    // logits of every cached step vs a full recompute of the same prefix
    const sequence = [...prompt, ...cached];
    session.prefill(prompt);
    const step = session.step(1);
    const recompute = session.logitsAtEveryPosition(sequence);
    session.prefill(prompt);
    const cachedLogits = new Float32Array(V);
    let worst = 0;
    for (let i = 1; i < N; i++) {
      step.runEager();
      session.readLogits(cachedLogits);
      const at = prompt.length + i - 1;
      worst = Math.max(worst, maxRelativeError(cachedLogits, recompute.subarray(at * V, (at + 1) * V)));
    }
    expect(worst).toBeLessThan(1e-5);
  });

  test("a prefill of T tokens equals T single-token steps", () => {
    const T = prompt.length;
    session.prefill(prompt);
    const prefilled = session.readLogits().slice();
    const afterPrefill = session.readSequence(T + 1)[T];
    // each single step writes its argmax into seq[pos + 1]: restore the prompt before the next step
    session.setPosition(0);
    const single = session.step(1);
    for (let t = 0; t < T; t++) {
      session.setSequence(prompt);
      single.runEager();
    }
    expect(maxRelativeError(session.readLogits(), prefilled)).toBeLessThan(1e-5);
    expect(session.position()).toBe(T);
    expect(session.readSequence(T + 1)[T]).toBe(afterPrefill!);
  });
});

describe("mutants of the cache logic are caught", () => {
  const prompt = expected.prompt;
  const N = 40;
  const reference = () => uncachedIds(session, prompt, N);

  test("positions restart at 0 after the cache (embedding reads position 0)", () => {
    const zeroState = backend.alloc(16);
    backend.fill32(zeroState, 0);
    const mutant = decodeWithStep(session, prompt, N, (ops) =>
      ops.map((o) => (o.family === "embed" ? { ...o, args: o.args.map((a, i) => (i === 2 ? zeroState.ptr : a)) } : o)));
    backend.free(zeroState);
    expect(mutant).not.toEqual(reference());
  });

  test("K and V swapped in attention", () => {
    const mutant = decodeWithStep(session, prompt, N, (ops) =>
      ops.map((o) => (o.family === "attention" ? { ...o, args: o.args.map((a, i) => (i === 3 ? o.args[4]! : i === 4 ? o.args[3]! : a)) } : o)));
    expect(mutant).not.toEqual(reference());
  });

  test("a mask slice one key too wide (CPU library built with -DPLANT_BUG_MASK)", () => {
    const path = ensureBuilt("cpu", { extraFlags: ["-DPLANT_BUG_MASK"], variant: "planted", quiet: true }).path;
    const planted = CpuBackend.openPath(path);
    const s = new Session(planted, weights);
    const logits = s.logitsAtEveryPosition(expected.sequence);
    expect(maxRelativeError(logits, expectedLogits)).toBeGreaterThan(1e-2);
    s.close();
    planted.close();
  });
});
