// be_alloc's zeroing contract (cuda/runtime.h): a fresh buffer reads as zero on every backend, even where
// the same memory was just freed dirty, so callers never clear the KV cache or the activations; so does a buffer
// allocated to be written whole (be_alloc_whole: the weights). On the CPU a fresh buffer is committed only where
// written: it costs no resident memory until touched.
import { afterAll, describe, expect, test } from "bun:test";

import type { Backend, Written } from "../src/backends/backend.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import { CudaBackend } from "../src/backends/cuda.ts";

const DIRTY = 0xdeadbeef;
const cpu = CpuBackend.open();
const emu = CudaBackend.open({ emulated: true });
afterAll(() => {
  cpu.close();
  emu.close();
});

describe("be_alloc and be_alloc_whole return zeroed memory", () => {
  test.each([
    ["cpu", "in part", cpu],
    ["cpu", "whole", cpu],
    ["emu (the CUDA runtime's code)", "in part", emu],
    ["emu (the CUDA runtime's code)", "whole", emu],
  ] as Array<[string, Written, Backend]>)(
    "%s, written %s: fresh, and after a dirty buffer of the same size is freed",
    (_, written, backend) => {
      const bytes = 3 * 2 ** 20 + 12; // not a whole number of pages
      for (let round = 0; round < 3; round++) {
        const b = backend.alloc(bytes, written);
        const words = new Uint32Array(bytes / 4);
        backend.download(b, words);
        expect({ round, nonZero: words.findIndex((w) => w !== 0) }).toEqual({ round, nonZero: -1 });
        backend.fill32(b, DIRTY);
        backend.synchronize();
        backend.free(b);
      }
    },
  );
});

test("CPU: a fresh buffer costs no resident memory until written, then exactly the pages written", () => {
  const bytes = 64 * 2 ** 20;
  const before = cpu.memInfo().free;
  const b = cpu.alloc(bytes);
  expect(before - cpu.memInfo().free).toBe(0);
  cpu.fill32(b, 0, 2 ** 20); // the first 4 MiB
  expect(before - cpu.memInfo().free).toBe(4 * 2 ** 20);
  cpu.free(b);
  expect(before - cpu.memInfo().free).toBe(0);
});
