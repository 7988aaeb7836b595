// The CPU's read-bandwidth probe (src/backends/read-probe.ts): where its sweep finds the knee, how it sizes
// itself against the step's bytes and free memory, and what it reports; on a fake backend whose bandwidth
// depends on the size read (a cache of 480 MiB, as the development VM reports), then once on the real one.
import { afterAll, describe, expect, test } from "bun:test";

import type { DeviceBuffer } from "../src/backends/backend.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import { kneeOf, ReadProbe, type ReadProbeBackend } from "../src/backends/read-probe.ts";

const MIB = 2 ** 20,
  GIB = 2 ** 30;
const sweepOf = (rates: [number, number][]) =>
  rates.map(([mib, gbs]) => ({ bytes: mib * MIB, bytes_per_s: gbs * 1e9 }));

describe("the sweep's knee", () => {
  test("where the bandwidth stops falling: past a 480 MiB cache", () => {
    expect(
      kneeOf(
        sweepOf([
          [32, 60],
          [64, 58],
          [128, 57],
          [256, 55],
          [512, 30],
          [1024, 22],
          [2048, 21],
          [4096, 22],
        ]),
      ),
    ).toBe(1024 * MIB);
  });

  test("a flat sweep (no cache effect a pass can see) has its knee at the smallest size", () => {
    expect(
      kneeOf(
        sweepOf([
          [32, 60],
          [64, 61],
          [128, 59],
          [256, 60],
          [4096, 60],
        ]),
      ),
    ).toBe(32 * MIB);
  });

  test("one slow size of a noisy sweep does not move the knee to it", () => {
    expect(
      kneeOf(
        sweepOf([
          [32, 90],
          [64, 80],
          [128, 60],
          [256, 62],
          [512, 61],
          [1024, 60],
          [2048, 61],
          [4096, 32],
        ]),
      ),
    ).toBe(128 * MIB);
  });
});

/** A backend whose passes read at 60 GB/s up to 480 MiB and 22 GB/s past it; it records what was allocated and read. */
function fakeBackend() {
  const allocated: number[] = [],
    freed: number[] = [],
    prepared: number[] = [],
    reads: number[] = [];
  const backend: ReadProbeBackend = {
    threads: 2,
    alloc: (bytes) => {
      allocated.push(bytes);
      return { ptr: 1, bytes };
    },
    free: (b: DeviceBuffer) => void freed.push(b.bytes),
    readPrepare: (b) => void prepared.push(b.bytes),
    readPass: (_b, bytes) => {
      reads.push(bytes);
      return bytes / (bytes <= 480 * MIB ? 60e9 : 22e9);
    },
  };
  return { backend, allocated, freed, prepared, reads };
}

describe("the probe's size and report", () => {
  test("a small step reads at the knee; one buffer of the sweep's top serves everything, prepared once and freed", () => {
    const f = fakeBackend();
    const probe = ReadProbe.open(f.backend, 2 * MIB, 64 * GIB);
    expect(f.allocated).toEqual([4 * GIB]);
    expect(f.prepared).toEqual([4 * GIB]);
    expect(probe.bytes).toBe(512 * MIB); // the first size past the cache
    for (let i = 0; i < 4; i++) expect(probe.pass()).toBeCloseTo(22e9, -3);
    const r = probe.report();
    expect(r).toMatchObject({ buffer_bytes: 512 * MIB, knee_bytes: 512 * MIB, capped: false, passes: { count: 4 } });
    expect(r.bytes_per_s).toBeCloseTo(22e9, -3);
    expect(r.sweep.map((p) => p.bytes / MIB)).toEqual([32, 64, 128, 256, 512, 1024, 2048, 4096]);
    expect(r.how_measured).toContain("best of 4 passes summing 512 MiB on 2 threads");
    expect(r.how_measured).toContain("a sweep of 32 MiB–4 GiB stops falling (512 MiB)");
    probe.close();
    expect(f.freed).toEqual([4 * GIB]);
  });

  test("every sweep size is read in rounds, each timed pass after an untimed one of the same size", () => {
    const f = fakeBackend();
    ReadProbe.open(f.backend, 0, 64 * GIB).close();
    const sizes = [32, 64, 128, 256, 512, 1024, 2048, 4096].map((m) => m * MIB);
    expect(f.reads).toEqual(Array.from({ length: 5 }, () => sizes.flatMap((s) => [s, s])).flat());
  });

  test("a step larger than the knee is read whole; past a quarter of free memory, capped and said so", () => {
    const f = fakeBackend();
    const whole = ReadProbe.open(f.backend, 3.1e9, 64 * GIB);
    expect(whole.bytes).toBe(Math.ceil(3.1e9 / MIB) * MIB);
    whole.close();
    const big = fakeBackend();
    const capped = ReadProbe.open(big.backend, 12e9, 16 * GIB); // a quarter of 16 GiB: 4 GiB
    expect(big.allocated).toEqual([4 * GIB]);
    expect(capped.bytes).toBe(4 * GIB);
    capped.pass();
    expect(capped.report().capped).toBe(true);
    expect(capped.report().how_measured).toContain("which capped it below the step's bytes");
    capped.close();
  });

  test("a report before any pass is an error, not a figure of nothing", () => {
    const probe = ReadProbe.open(fakeBackend().backend, 0, 64 * GIB);
    expect(() => probe.report()).toThrow(/no pass taken/);
  });
});

describe("on the CPU library", () => {
  const cpu = CpuBackend.open();
  afterAll(() => cpu.close());

  test("a pass reads the buffer's first bytes at a positive rate; the sweep's figures are positive", () => {
    const probe = ReadProbe.open(cpu, 0, 256 * MIB); // a quarter: 64 MiB, a sweep of 32 and 64 MiB
    expect(probe.bytes).toBeLessThanOrEqual(64 * MIB);
    expect(probe.pass()).toBeGreaterThan(0);
    const r = probe.report();
    expect(r.sweep.map((p) => p.bytes / MIB)).toEqual([32, 64]);
    for (const p of r.sweep) expect(p.bytes_per_s).toBeGreaterThan(0);
    probe.close();
  });

  test("a buffer the library cannot take is one error", () => {
    expect(() => cpu.readPrepare({ ptr: 0, bytes: 4096 })).toThrow(/read probe/);
  });
});
