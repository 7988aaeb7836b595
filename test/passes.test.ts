// A whole sequence in passes (plans.ts passesOf, Session.passes): a prefill, a recompute and the logits at every
// position computed in passes of a few rows agree with one pass over the whole prompt, for GPT-2 and a
// Llama-family model; the passes before the last leave the prompt's tokens as they were (their argmax writes
// the sink), and every sequence of a batch gets its own.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { loadAnyModel, type ModelWeights } from "../src/model/architectures.ts";
import { randomWeights } from "../src/model/gpt2.ts";
import { passesOf } from "../src/plans.ts";
import { promptOf } from "../src/profile/prompts.ts";
import { Session } from "../src/run/session.ts";
import { maxRelativeError } from "../src/verify/compare.ts";

const cpu = CpuBackend.open();
afterAll(() => cpu.close());

const MODELS: [string, ModelWeights][] = [
  [
    "gpt2",
    randomWeights({
      name: "gpt2-passes",
      n_layer: 2,
      n_head: 2,
      n_embd: 64,
      n_positions: 128,
      vocab_size: 97,
      layer_norm_epsilon: 1e-5,
    }),
  ],
  ["llama-tiny", loadAnyModel(join(import.meta.dir, "fixtures/llama-tiny"))],
];
const PROMPT = 53;
const PASS = 16; // 53 rows: passes of 16, 16, 16 and 5
const NEW_TOKENS = 5;
const TOLERANCE = 1e-5;

describe("passesOf", () => {
  test("splits rows from a position into passes of at most the given rows, the last one shorter", () => {
    expect(passesOf(53, 16)).toEqual([
      { pos: 0, T: 16 },
      { pos: 16, T: 16 },
      { pos: 32, T: 16 },
      { pos: 48, T: 5 },
    ]);
    expect(passesOf(32, 16, 7)).toEqual([
      { pos: 7, T: 16 },
      { pos: 23, T: 16 },
    ]);
    expect(passesOf(3, 2048)).toEqual([{ pos: 0, T: 3 }]);
    expect(() => passesOf(0, 16)).toThrow(RangeError);
    expect(() => passesOf(5, 0)).toThrow(RangeError);
  });
});

describe("a sequence in passes agrees with one pass over it", () => {
  for (const [name, weights] of MODELS) {
    const prompt = promptOf(PROMPT, weights.config.vocab_size, 3);
    const sessionOf = (maxRows: number, batch = 1) =>
      new Session(cpu, weights, { form: { plan: "fused", batch, weights: "f32", kv: "f32" }, maxRows });

    test(`${name}: prefill, then greedy decode steps`, () => {
      const whole = sessionOf(PROMPT);
      const passes = sessionOf(PASS);
      try {
        const run = (s: Session<ModelWeights>) => {
          s.prefill(prompt);
          const logits = Float32Array.from(s.readLogits());
          const first = s.readSequence(PROMPT + 1);
          for (let i = 1; i < NEW_TOKENS; i++) s.run(1);
          return { logits, first, tokens: s.readSequence(PROMPT + NEW_TOKENS), position: s.position() };
        };
        const a = run(whole);
        const b = run(passes);
        expect(passes.passes(PROMPT).steps).toHaveLength(4);
        // the passes before the last wrote their argmax to the sink: the prompt's tokens are the prompt's
        expect(b.first.slice(0, PROMPT)).toEqual(prompt);
        expect(maxRelativeError(b.logits, a.logits)).toBeLessThanOrEqual(TOLERANCE);
        expect(b.tokens).toEqual(a.tokens);
        expect([b.position, a.position]).toEqual([PROMPT + NEW_TOKENS - 1, PROMPT + NEW_TOKENS - 1]);
      } finally {
        whole.close();
        passes.close();
      }
    });

    test(`${name}: logits at every position and a prefill after a kept prefix`, () => {
      const whole = sessionOf(PROMPT);
      const passes = sessionOf(PASS);
      try {
        const a = whole.logitsAtEveryPosition(prompt);
        const b = passes.logitsAtEveryPosition(prompt);
        expect(maxRelativeError(b, a)).toBeLessThanOrEqual(TOLERANCE);
        // from position 20 (the rows before it already cached): passes of 16 from there
        passes.prefill(prompt, 0, 20);
        whole.prefill(prompt, 0, 20);
        expect(maxRelativeError(passes.readLogits(), whole.readLogits())).toBeLessThanOrEqual(TOLERANCE);
        expect(passes.readSequence(PROMPT)).toEqual(prompt);
      } finally {
        whole.close();
        passes.close();
      }
    });

    test(`${name}: every sequence of a batch recomputed in passes keeps its own tokens`, () => {
      const s = sessionOf(2 * PASS, 2); // 16 rows of each of 2 sequences per pass
      try {
        const other = promptOf(PROMPT, weights.config.vocab_size, 4);
        s.setSequence(prompt, 0);
        s.setSequence(other, 1);
        s.setPosition(0);
        const { steps, last } = s.passes(PROMPT);
        expect([steps.length, last]).toEqual([4, { T: 5, pos: 48 }]);
        for (const step of steps) step.runEager();
        expect(s.readSequence(PROMPT, 0)).toEqual(prompt);
        expect(s.readSequence(PROMPT, 1)).toEqual(other);
        expect([s.position(0), s.position(1)]).toEqual([PROMPT, PROMPT]);
      } finally {
        s.close();
      }
    });
  }
});
