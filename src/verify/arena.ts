// Data on a backend for checks and tests: uploads, NaN-poisoned outputs, downloads.
import type { Backend, DeviceBuffer } from "../backends/backend.ts";
import type { StoredWords } from "../model/dtypes.ts";
import { NAN_WORD } from "./compare.ts";

export class DeviceArena {
  private readonly buffers: DeviceBuffer[] = [];
  constructor(readonly backend: Backend) {}

  /** a buffer holding `data` (32-bit words, or 16-bit storage types) */
  put(data: Float32Array | Int32Array | Uint16Array | Float16Array): DeviceBuffer {
    const b = this.backend.alloc(Math.max(4, data.byteLength));
    this.buffers.push(b);
    this.backend.upload(b, data);
    return b;
  }

  /** a buffer holding a linear layer's (rows = in, cols = out) weight matrix, in the backend's own layout of it */
  putMatrix(data: StoredWords, rows: number, cols: number): DeviceBuffer {
    const b = this.backend.alloc(Math.max(4, data.byteLength));
    this.buffers.push(b);
    this.backend.uploadMatrix(b, { data, rows, cols, first: 0 });
    return b;
  }

  /** a buffer of `n` 32-bit words, poisoned with NaN so an unwritten element shows */
  poisoned(n: number): DeviceBuffer {
    const b = this.backend.alloc(Math.max(4, n * 4));
    this.buffers.push(b);
    this.backend.fill32(b, NAN_WORD);
    return b;
  }

  /** a buffer of `n` zero words (the attention kernel's scratch counters start at zero) */
  zeroed(n: number): DeviceBuffer {
    const b = this.backend.alloc(Math.max(4, n * 4));
    this.buffers.push(b);
    this.backend.fill32(b, 0);
    return b;
  }

  floats(b: DeviceBuffer, n = b.bytes / 4): Float32Array {
    const out = new Float32Array(n);
    this.backend.synchronize();
    this.backend.download(b, out);
    return out;
  }

  ints(b: DeviceBuffer, n = b.bytes / 4): Int32Array {
    const out = new Int32Array(n);
    this.backend.synchronize();
    this.backend.download(b, out);
    return out;
  }

  bytes(b: DeviceBuffer, n = b.bytes): Uint8Array {
    const out = new Uint8Array(n);
    this.backend.synchronize();
    this.backend.download(b, out);
    return out;
  }

  release(): void {
    for (const b of this.buffers) this.backend.free(b);
    this.buffers.length = 0;
  }
}

/** The largest seed: a fresh one is a uint32. */
export const SEED_MAX = 0xffffffff;

/** A fresh seed per run, printed so a failure can be replayed with SEED=… */
export function freshSeed(): number {
  const fixed = process.env.SEED;
  return fixed ? Number(fixed) : (Date.now() ^ (process.pid << 8)) >>> 0;
}
