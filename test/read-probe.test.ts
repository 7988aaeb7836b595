// The CPU's read-bandwidth probe (src/backends/read-probe.ts): where its sweep finds the knee, how it sizes
// itself against the step's bytes and free memory, and what it reports, and the tracker that reads beside each
// point's steps; on a fake backend whose bandwidth depends on the size read (a cache of 480 MiB, as the development
// VM reports) and on a host rate the test moves, then once on the real one.
import { afterAll, describe, expect, test } from "bun:test";

import type { DeviceBuffer } from "../src/backends/backend.ts";
import { CpuBackend } from "../src/backends/cpu.ts";
import {
  kneeOf,
  measureRead,
  READ_PROBE_PASSES,
  ReadProbe,
  ReadTracker,
  type ReadProbeBackend,
} from "../src/backends/read-probe.ts";

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

/**
 * A backend whose passes read at 60 GB/s up to 480 MiB and 22 GB/s past it, × `host.rate` (the host's memory, which
 * a test may move); it records what was allocated and read.
 */
function fakeBackend() {
  const allocated: number[] = [],
    freed: number[] = [],
    prepared: number[] = [],
    reads: number[] = [];
  const host = { rate: 1 };
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
      return bytes / ((bytes <= 480 * MIB ? 60e9 : 22e9) * host.rate);
    },
  };
  return { backend, allocated, freed, prepared, reads, host };
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

describe("the tracker beside the points' steps", () => {
  /** A probe for a step of 3.1 GB (knee 512 MiB) and its tracker, calibrated with 3 passes of each in turn. */
  function calibrated(f: ReturnType<typeof fakeBackend>) {
    const probe = ReadProbe.open(f.backend, 3.1e9, 64 * GIB);
    const tracker = ReadTracker.open(f.backend, probe);
    for (let i = 0; i < 3; i++) {
      probe.pass();
      tracker.calibrationPass();
    }
    tracker.calibrate(probe.report().bytes_per_s);
    probe.close();
    return tracker;
  }

  test("twice the knee, filled once; its passes follow the host's memory, in the probe's bytes/s", () => {
    const f = fakeBackend();
    const tracker = calibrated(f);
    expect(tracker.bytes).toBe(GIB);
    expect(f.prepared).toContain(GIB);
    expect(tracker.pass(3.1e9)).toBeCloseTo(22e9, -3);
    f.host.rate = 0.6; // the host's memory slowed by 40% since the probe
    expect(tracker.pass(3.1e9)).toBeCloseTo(0.6 * 22e9, -3);
    const passes = f.reads.length;
    expect(tracker.pass(400 * MIB)).toBeNull(); // below the knee: the cache serves part of that step, a pass would evict it
    expect(f.reads.length).toBe(passes);
    tracker.close();
    expect(f.freed).toContain(GIB);
  });

  test("a tracker that reads faster than the probe (part of it in a cache) is scaled down to the probe's figure", () => {
    const f = fakeBackend();
    const probe = ReadProbe.open(f.backend, 3.1e9, 64 * GIB);
    const tracker = ReadTracker.open(f.backend, probe);
    probe.pass();
    f.host.rate = 1.1; // the tracker's calibration pass read 10% faster than the probe's
    tracker.calibrationPass();
    tracker.calibrate(probe.report().bytes_per_s);
    expect(tracker.pass(3.1e9)).toBeCloseTo(22e9, -3);
    probe.close();
    tracker.close();
  });

  test("at most the probe's size; none where every step is below the knee, or past 1/16 of free memory", () => {
    const f = fakeBackend();
    const probe = ReadProbe.open(f.backend, 600 * MIB, 64 * GIB);
    expect(probe.bytes).toBe(600 * MIB);
    expect(ReadTracker.without(probe, 600 * MIB, 64 * GIB)).toBeNull();
    const tracker = ReadTracker.open(f.backend, probe);
    expect(tracker.bytes).toBe(600 * MIB); // twice the knee is 1 GiB, more than the probe reads
    tracker.close();
    expect(ReadTracker.without(probe, 600 * MIB, 8 * GIB)).toMatch(/more than 1\/16 of free memory/); // 600 MiB > 512
    expect(ReadTracker.without(probe, 300 * MIB, 64 * GIB)).toMatch(/every step is smaller than the knee/);
    probe.close();
  });

  test("a pass before calibration, or a calibration without passes, is an error", () => {
    const f = fakeBackend();
    const probe = ReadProbe.open(f.backend, 3.1e9, 64 * GIB);
    const tracker = ReadTracker.open(f.backend, probe);
    expect(() => tracker.pass(3.1e9)).toThrow(/not calibrated/);
    expect(() => tracker.calibrate(22e9)).toThrow(/no calibration pass/);
    tracker.close();
    probe.close();
  });
});

describe("measureRead: the probe's passes, each followed by its tracker's", () => {
  const ascending = (sizes: number[]) => [...sizes].sort((a, b) => a - b);
  const SWEEP_READS = 5 * 8 * 2; // 5 rounds of 8 sizes, each an untimed and a timed pass

  test("past the knee: the passes in turn, the tracker calibrated and held open, the probe freed", () => {
    const f = fakeBackend();
    const { report, tracker, beside } = measureRead(f.backend, 3.1e9, 64 * GIB);
    const probeBytes = Math.ceil(3.1e9 / MIB) * MIB;
    expect(f.reads.slice(SWEEP_READS)).toEqual(
      Array.from({ length: READ_PROBE_PASSES }, () => [probeBytes, GIB]).flat(),
    );
    expect(report.passes.count).toBe(READ_PROBE_PASSES);
    expect(report.bytes_per_s).toBeCloseTo(22e9, -3);
    expect(tracker!.pass(3.1e9)).toBeCloseTo(22e9, -3); // calibrated
    expect(beside).toBe(
      `; right before each timed step past the knee, a pass over 1024 MiB (twice the knee, at least 512 MiB, at most the probe's size) ` +
        `scaled by the probe's best over its best in ${READ_PROBE_PASSES} passes of each in turn`,
    );
    expect(f.freed).toEqual([4 * GIB]); // the probe's buffer; the tracker's is the caller's
    tracker!.close();
    expect(f.freed).toEqual([4 * GIB, GIB]);
  });

  test("every step below the knee: no tracker, and why, in the clause that follows how_measured", () => {
    const f = fakeBackend();
    const { tracker, beside } = measureRead(f.backend, 300 * MIB, 64 * GIB);
    expect(tracker).toBeNull();
    expect(beside).toBe(
      "; no read passes beside the timed steps (every step is smaller than the knee: the last-level cache serves part of each, and a pass would evict it)",
    );
    expect(f.reads.slice(SWEEP_READS)).toEqual(Array.from({ length: READ_PROBE_PASSES }, () => 512 * MIB));
    expect(f.freed).toEqual(f.allocated);
  });

  test("a fill or a sweep pass that fails frees the probe's buffer; a failed fill of the tracker's, both", () => {
    const failing = (when: (bytes: number, call: number) => boolean, what: "readPrepare" | "readPass") => {
      const f = fakeBackend();
      const real = f.backend[what] as (b: DeviceBuffer, bytes: number) => number;
      let calls = 0;
      f.backend[what] = ((b: DeviceBuffer, bytes: number) => {
        if (when(b.bytes, ++calls)) throw new Error(`${what} failed`);
        return real(b, bytes);
      }) as never;
      expect(() => measureRead(f.backend, 3.1e9, 64 * GIB)).toThrow(`${what} failed`);
      expect(ascending(f.freed)).toEqual(ascending(f.allocated));
      return f;
    };
    expect(failing((_, call) => call === 1, "readPrepare").allocated).toEqual([4 * GIB]); // the probe's fill
    expect(failing((_, call) => call === 7, "readPass").allocated).toEqual([4 * GIB]); // a sweep pass
    expect(failing((bytes) => bytes === GIB, "readPrepare").allocated).toEqual([4 * GIB, GIB]); // the tracker's fill
  });

  test("a pass that fails mid-calibration frees the tracker's buffer and the probe's", () => {
    const f = fakeBackend();
    const readPass = f.backend.readPass;
    let passes = 0;
    f.backend.readPass = (b, bytes) => {
      if (++passes === SWEEP_READS + 3) throw new Error("the library failed a pass");
      return readPass(b, bytes);
    };
    expect(() => measureRead(f.backend, 3.1e9, 64 * GIB)).toThrow("the library failed a pass");
    expect(ascending(f.freed)).toEqual(ascending(f.allocated));
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
