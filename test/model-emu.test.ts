// The whole model through the CUDA library's own code on the CPU emulator (libgpt2_emu.so): kernels,
// host runtime, graph capture and replay. Same checks as `bun run verify` runs without a GPU.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";

import { CudaBackend } from "../src/backends/cuda.ts";
import { loadModel } from "../src/model/weights.ts";
import { cachedEqualsUncached, fixtureChecks, graphMemoryStable, modesBitIdentical, readFixture } from "../src/verify/model-checks.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
/** The emulator runs every CUDA thread as a fiber: ~20 s per test alone, several times that on busy cores. */
const EMU_TIMEOUT_MS = 600_000;
const emu = CudaBackend.open({ emulated: true });
const weights = loadModel(FIXTURE);
const fixture = readFixture(FIXTURE);
afterAll(() => emu.close());

test("gpt2-tiny logits and greedy continuation in eager, eager-native, graph and uncached", () => {
  const rows = fixtureChecks(emu, weights, fixture);
  expect(rows.map((r) => `${r.check} ${r.detail}: ${r.status}`)).toEqual(rows.map((r) => `${r.check} ${r.detail}: pass`));
  expect(rows).toHaveLength(5);
}, EMU_TIMEOUT_MS);

test("the launch modes agree bit for bit, and the cache is exact, over every position", () => {
  const n = weights.config.n_positions - fixture.prompt.length;
  expect(modesBitIdentical(emu, weights, fixture.prompt, n).status).toBe("pass");
  expect(cachedEqualsUncached(emu, weights, fixture.prompt, n).status).toBe("pass");
}, EMU_TIMEOUT_MS);

test("graph replays allocate nothing", () => {
  expect(graphMemoryStable(emu, weights, 20).status).toBe("pass");
}, EMU_TIMEOUT_MS);
