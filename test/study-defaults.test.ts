// The contexts a study sweeps by default (src/backends/backend.ts defaultSweep): the backend's defaults capped at the
// model's last context, and its long contexts where the model has the positions, on the CPU and on a GPU.
import { expect, test } from "bun:test";

import { defaultSweep, HOST_STUDY_DEFAULTS } from "../src/backends/backend.ts";
import { GPU_STUDY } from "../src/backends/cuda.ts";
import { ALL_PRESETS } from "../src/model/architectures.ts";

const positions = (preset: string) => ALL_PRESETS[preset]!.n_positions;

test("GPT-2 (1024 positions): the defaults capped at 1023, no long context on either backend", () => {
  expect(defaultSweep(HOST_STUDY_DEFAULTS, positions("gpt2"))).toEqual([8, 10, 16, 32, 64, 100, 128]);
  expect(defaultSweep(GPU_STUDY, positions("gpt2"))).toEqual([8, 10, 16, 32, 64, 100, 128, 256, 500, 512, 1000, 1023]);
});

test("SmolLM2 (8192 positions): the CPU adds 2048, 4096 and 8191; a GPU the same, and not past it", () => {
  expect(defaultSweep(HOST_STUDY_DEFAULTS, positions("smollm2-135m")).slice(-4)).toEqual([128, 2048, 4096, 8191]);
  expect(defaultSweep(GPU_STUDY, positions("smollm2-135m")).slice(-4)).toEqual([1024, 2048, 4096, 8191]);
});

test("Llama-3.2-1B (131072 positions): a GPU sweeps to 32768, the CPU to 8192", () => {
  expect(defaultSweep(GPU_STUDY, positions("llama-3.2-1b")).slice(-5)).toEqual([2048, 4096, 8192, 16384, 32768]);
  expect(Math.max(...defaultSweep(HOST_STUDY_DEFAULTS, positions("llama-3.2-1b")))).toBe(8192);
});
