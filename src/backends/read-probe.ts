// The CPU's read bandwidth from memory, the floor a decode step's bytes are held against (bench cpu, profile). A
// buffer that the last-level cache can serve reads faster than memory, and a VM's reported LLC size is not to be
// trusted (the development VM reports 480 MiB), so the probe finds its size: a sweep of buffer sizes, in rounds,
// finds where the bandwidth stops falling (the knee); the probe reads the larger of that and the
// step's own bytes, capped at a quarter of free memory. One buffer serves the sweep and the passes (each size its
// first bytes), so gigabytes are faulted in once.
import { freemem } from "node:os";

import { summarize } from "../stats.ts";
import type { DeviceBuffer } from "./backend.ts";
import type { ReadProbeReport } from "./instrument.ts";
import { counted } from "../words.ts";

/** What the probe uses of the CPU backend (cuda/cpu_runtime.cpp cpu_read_prepare, cpu_read_pass). */
export interface ReadProbeBackend {
  readonly threads: number;
  alloc(bytes: number): DeviceBuffer;
  free(buffer: DeviceBuffer): void;
  readPrepare(buffer: DeviceBuffer): void;
  /** seconds of one pass over the first `bytes` of `buffer` */
  readPass(buffer: DeviceBuffer, bytes: number): number;
}

const MIB = 2 ** 20;
const SWEEP_FIRST_BYTES = 32 * MIB;
/** the sweep's largest size, unless the step's bytes are larger: past any LLC a machine of this kind has */
const SWEEP_TOP_BYTES = 4 * 2 ** 30;
/**
 * rounds of one timed pass per size, in turn, each right after an untimed one of the same size (whatever the cache
 * holds of it is then there): a drift of a shared machine's bandwidth lasting a round misses the other rounds
 */
const SWEEP_ROUNDS = 5;
/** a size reading within this share of the sizes from it up has stopped falling */
const KNEE_MARGIN = 0.1;
const MEMORY_SHARE = 0.25;

/** The sweep's sizes: SWEEP_FIRST_BYTES doubling, then `top` itself. */
function sweepSizes(top: number): number[] {
  const sizes: number[] = [];
  for (let s = SWEEP_FIRST_BYTES; s < top; s *= 2) sizes.push(s);
  return [...sizes, top];
}

/**
 * The smallest size whose best pass is within KNEE_MARGIN of the median of its own and every larger size's: where the
 * bandwidth has stopped falling (a median, so one slow size of a noisy sweep does not move the knee to it).
 */
export function kneeOf(sweep: readonly { bytes: number; bytes_per_s: number }[]): number {
  const median = (k: number) => summarize(sweep.slice(k).map((p) => p.bytes_per_s)).median;
  return sweep.find((p, k) => p.bytes_per_s <= median(k) * (1 + KNEE_MARGIN))!.bytes;
}

export class ReadProbe {
  private readonly samples: number[] = [];

  private constructor(
    private readonly backend: ReadProbeBackend,
    private readonly buffer: DeviceBuffer,
    readonly bytes: number,
    private readonly sweep: { bytes: number; bytes_per_s: number }[],
    private readonly capped: boolean,
  ) {}

  /** Allocates and fills the buffer, sweeps it, and settles the probe's size for a step of `stepBytes`. */
  static open(backend: ReadProbeBackend, stepBytes: number, freeBytes = freemem()): ReadProbe {
    const cap = Math.floor((freeBytes * MEMORY_SHARE) / MIB) * MIB;
    const top = Math.min(cap, Math.max(SWEEP_TOP_BYTES, Math.ceil(stepBytes / MIB) * MIB));
    const buffer = backend.alloc(top);
    const sweep = sweepSizes(top).map((bytes) => ({ bytes, bytes_per_s: 0 }));
    try {
      backend.readPrepare(buffer);
      for (let r = 0; r < SWEEP_ROUNDS; r++)
        for (const size of sweep) {
          backend.readPass(buffer, size.bytes); // what the cache can hold of this size is in it, as for back-to-back steps
          size.bytes_per_s = Math.max(size.bytes_per_s, size.bytes / backend.readPass(buffer, size.bytes));
        }
    } catch (error) {
      backend.free(buffer); // up to gigabytes: not left behind by a failed fill or pass
      throw error;
    }
    const bytes = Math.min(top, Math.max(kneeOf(sweep), Math.ceil(stepBytes / MIB) * MIB));
    return new ReadProbe(backend, buffer, bytes, sweep, bytes < stepBytes);
  }

  /** where its sweep stopped falling */
  get knee(): number {
    return kneeOf(this.sweep);
  }

  /** One pass at the probe's size, kept for the report: bytes/s. */
  pass(): number {
    const bytesPerS = this.bytes / this.backend.readPass(this.buffer, this.bytes);
    this.samples.push(bytesPerS);
    return bytesPerS;
  }

  report(): Omit<ReadProbeReport, "tracker_bytes"> {
    if (this.samples.length === 0) throw new RangeError("ReadProbe.report: no pass taken");
    const s = summarize(this.samples);
    const gib = (b: number) => (b < 2 ** 30 ? `${Math.round(b / MIB)} MiB` : `${+(b / 2 ** 30).toPrecision(3)} GiB`);
    return {
      bytes_per_s: s.max,
      passes: { count: this.samples.length, min: s.min, median: s.median, max: s.max },
      buffer_bytes: this.bytes,
      knee_bytes: this.knee,
      sweep: this.sweep,
      capped: this.capped,
      how_measured:
        `read bandwidth: best of ${this.samples.length} passes summing ${gib(this.bytes)} on ${counted(this.backend.threads, "thread")} ` +
        `(median ${(s.median / 1e9).toFixed(1)}, ${(s.min / 1e9).toFixed(1)}–${(s.max / 1e9).toFixed(1)} GB/s); the size is the larger of the step's ` +
        `bytes and where a sweep of ${gib(this.sweep[0]!.bytes)}–${gib(this.sweep[this.sweep.length - 1]!.bytes)} stops falling ` +
        `(${gib(this.knee)}), capped at a quarter of free memory${this.capped ? " (which capped it below the step's bytes)" : ""}`,
    };
  }

  close(): void {
    this.backend.free(this.buffer);
  }
}

/** The tracker reads at least this much: past the last-level cache of a machine of this kind. */
const TRACKER_LEAST_BYTES = 512 * MIB;
/** The tracker's buffer at most this share of the memory free when it opens: it stays for the whole study. */
export const TRACKER_MEMORY_SHARE = 1 / 16;
/** Twice the probe's knee, at least TRACKER_LEAST_BYTES, at most the probe's own size. */
const trackerBytes = (probe: ReadProbe) => Math.min(probe.bytes, Math.max(2 * probe.knee, TRACKER_LEAST_BYTES));

/**
 * The memory's read rate right beside each timed step, long after the probe: a shared host's DRAM read rate can
 * flip between two levels within seconds (the development VM's 40–48 and 70–83 GB/s, the step's time following it),
 * so each step's floor comes from a pass taken just before it. The tracker reads twice the probe's knee (at least
 * TRACKER_LEAST_BYTES, at most the probe's size, which may be the step's gigabytes), each pass scaled to the probe's
 * size by the probe's best pass over the tracker's best when the two were read in turn.
 */
export class ReadTracker {
  private readonly calibration: number[] = [];
  private scale: number | null = null;

  private constructor(
    private readonly backend: ReadProbeBackend,
    /** its passes' buffer (how it is paged: src/backends/huge-pages.ts) */
    readonly buffer: DeviceBuffer,
    readonly bytes: number,
    private readonly knee: number,
  ) {}

  /** Why no tracker serves a study whose largest step moves `stepBytes` beside `probe`; null where one does. */
  static without(probe: ReadProbe, stepBytes: number, freeBytes = freemem()): string | null {
    if (stepBytes < probe.knee)
      return "every step is smaller than the knee: the last-level cache serves part of each, and a pass would evict it";
    if (trackerBytes(probe) > freeBytes * TRACKER_MEMORY_SHARE)
      return "the passes' buffer would take more than 1/16 of free memory";
    return null;
  }

  /** A tracker for `probe`, its buffer filled (where `without` says none, none is wanted). */
  static open(backend: ReadProbeBackend, probe: ReadProbe): ReadTracker {
    const bytes = trackerBytes(probe);
    const buffer = backend.alloc(bytes);
    try {
      backend.readPrepare(buffer);
    } catch (error) {
      backend.free(buffer);
      throw error;
    }
    return new ReadTracker(backend, buffer, bytes, probe.knee);
  }

  /** One pass beside one of the probe's, before calibrate. */
  calibrationPass(): void {
    this.calibration.push(this.rawPass());
  }

  /** Fixes the scale from the probe's best pass, taken in turn with the calibration passes. */
  calibrate(probeBytesPerS: number): void {
    if (this.calibration.length === 0) throw new RangeError("ReadTracker.calibrate: no calibration pass taken");
    this.scale = probeBytesPerS / Math.max(...this.calibration);
  }

  /**
   * One pass beside a step that moves `stepBytes`, as bytes/s at the probe's size; null where the step is smaller
   * than the knee: the last-level cache serves part of it, and a pass would evict that part.
   */
  pass(stepBytes: number): number | null {
    if (this.scale === null) throw new RangeError("ReadTracker.pass: not calibrated");
    return stepBytes < this.knee ? null : this.rawPass() * this.scale;
  }

  private rawPass(): number {
    return this.bytes / this.backend.readPass(this.buffer, this.bytes);
  }

  close(): void {
    this.backend.free(this.buffer);
  }
}

/** Passes of the probe, each followed by one of its tracker's (which they calibrate). */
export const READ_PROBE_PASSES = 8;

/** The probe's figure for steps of up to some bytes, and the tracker beside them where one serves. */
export interface CalibratedRead {
  report: Omit<ReadProbeReport, "tracker_bytes">;
  tracker: ReadTracker | null;
  /** how the passes beside the timed steps are taken, or why none are: a clause that follows `how_measured` */
  beside: string;
}

/**
 * The probe sized for steps of up to `stepBytes`, READ_PROBE_PASSES of its passes and, where a tracker serves such
 * steps, one of the tracker's after each, calibrating it. The probe is closed; the tracker is the caller's to close.
 * `freeBytes` (tests) stands for the memory free, read otherwise as each buffer is sized.
 */
export function measureRead(backend: ReadProbeBackend, stepBytes: number, freeBytes?: number): CalibratedRead {
  const probe = ReadProbe.open(backend, stepBytes, freeBytes ?? freemem());
  let tracker: ReadTracker | null = null;
  try {
    // the memory free once the probe holds its buffer
    const without = ReadTracker.without(probe, stepBytes, freeBytes ?? freemem());
    tracker = without === null ? ReadTracker.open(backend, probe) : null;
    for (let i = 0; i < READ_PROBE_PASSES; i++) {
      probe.pass();
      tracker?.calibrationPass();
    }
    const report = probe.report();
    tracker?.calibrate(report.bytes_per_s);
    const beside = tracker
      ? `; right before each timed step past the knee, a pass over ${Math.round(tracker.bytes / MIB)} MiB (twice the knee, at least 512 MiB, at most the probe's size) ` +
        `scaled by the probe's best over its best in ${READ_PROBE_PASSES} passes of each in turn`
      : `; no read passes beside the timed steps (${without})`;
    return { report, tracker, beside };
  } catch (error) {
    tracker?.close();
    throw error;
  } finally {
    probe.close();
  }
}
