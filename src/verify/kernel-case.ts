// One kernel case's plumbing: the same op run on a device backend and on the CPU backend, inputs uploaded,
// outputs poisoned (NaN) first and downloaded, the device's outputs kept for a bit-for-bit comparison of two runs.
import type { Backend } from "../backends/backend.ts";
import { DeviceArena } from "./arena.ts";
import { maxRelativeError, randomFloats } from "./compare.ts";

export const KERNEL_TOLERANCE = 1e-4;

/** A linear layer's (rows = in, cols = out) fp32 weight, placed in each backend's own layout of it. */
export class MatrixInput {
  constructor(
    readonly data: Float32Array,
    readonly rows: number,
    readonly cols: number,
  ) {}
}
/** a (rows, cols) weight matrix of random values (randomFloats' scale 0.1) */
export const randomMatrix = (rows: number, cols: number, seed: number) =>
  new MatrixInput(randomFloats(rows * cols, seed, 0.1), rows, cols);

export type Input = Float32Array | Int32Array | MatrixInput;
export type Pointers = Record<string, number>;

/** Room for the partials of every case's shapes (cuda/ops.h op_partials_bytes): up to 5 rows, C and OC <= 6400. */
const CASE_PARTIALS = { maxRows: 5, maxIn: 6400, maxOut: 6400, V: 65536 };

/**
 * The same op on two backends: inputs uploaded, outputs (name → words) poisoned, results downloaded. Every run
 * gets a zeroed partials buffer (`partials` among its pointers).
 */
export class Pair {
  readonly device: DeviceArena;
  readonly cpu: DeviceArena;
  /** the device's outputs of this case, by name, in the order produced */
  readonly deviceOutputs: Array<[string, Float32Array | Int32Array]> = [];
  constructor(device: Backend, cpu: Backend) {
    this.device = new DeviceArena(device);
    this.cpu = new DeviceArena(cpu);
  }

  /** A zeroed partials buffer on `arena`'s backend. */
  partials(arena: DeviceArena): number {
    const { maxRows, maxIn, maxOut, V } = CASE_PARTIALS;
    return arena.zeroed(Math.max(1, arena.backend.partialsBytes(maxRows, maxIn, maxOut, V) / 4)).ptr;
  }

  /** Keeps a device result for the bit-for-bit comparison of two runs. */
  note(name: string, data: Float32Array | Int32Array): void {
    this.deviceOutputs.push([name, data]);
  }

  private runOn(
    arena: DeviceArena,
    inputs: Record<string, Input>,
    outputs: Record<string, number>,
    inOut: string[],
    run: (b: Backend, p: Pointers) => void,
  ) {
    const p: Pointers = { partials: this.partials(arena) };
    const place = (data: Input) =>
      data instanceof MatrixInput ? arena.putMatrix(data.data, data.rows, data.cols) : arena.put(data);
    const given = Object.fromEntries(Object.entries(inputs).map(([name, data]) => [name, place(data)]));
    for (const [name, b] of Object.entries(given)) p[name] = b.ptr;
    const out = Object.fromEntries(Object.entries(outputs).map(([name, words]) => [name, arena.poisoned(words)]));
    for (const [name, b] of Object.entries(out)) p[name] = b.ptr;
    run(arena.backend, p);
    const read = { ...out, ...Object.fromEntries(inOut.map((name) => [name, given[name]!])) };
    return Object.fromEntries(Object.entries(read).map(([name, b]) => [name, arena.floats(b)]));
  }

  /** max relative error of the device's outputs (and the inputs named in inOut, which the op updates) against the CPU's */
  compare(
    inputs: Record<string, Input>,
    outputs: Record<string, number>,
    run: (b: Backend, p: Pointers) => void,
    inOut: string[] = [],
  ): number {
    const got = this.runOn(this.device, inputs, outputs, inOut, run);
    for (const [name, data] of Object.entries(got)) this.note(name, data);
    const want = this.runOn(this.cpu, inputs, outputs, inOut, run);
    return Math.max(...Object.keys(got).map((name) => maxRelativeError(got[name]!, want[name]!)));
  }

  release(): void {
    this.device.release();
    this.cpu.release();
  }
}

/** One sequence's state (cuda/ops.h): its position. */
export const stateAt = (pos: number) => Int32Array.of(pos, 0, 0, 0);

/** A check: runs on a pair of backends, returns its largest relative error (Infinity: an exact part failed). */
export interface KernelCase {
  kernel: string;
  shape: string;
  run(pair: Pair, seed: number): number;
}

/** The next token cuda/ops.h specifies: the lowest index of the largest non-NaN logit, 0 when all are NaN. */
export function expectedArgmax(logits: ArrayLike<number>): number {
  let best = -1;
  for (let v = 0; v < logits.length; v++) if (best < 0 ? logits[v]! >= -Infinity : logits[v]! > logits[best]!) best = v;
  return Math.max(best, 0);
}

/** A rotary table (max_ctx, hs): each position's cos then sin of p · theta^(-2i/hs). */
export function ropeTable(maxCtx: number, hs: number, theta = 10000): Float32Array {
  const table = new Float32Array(maxCtx * hs);
  for (let p = 0; p < maxCtx; p++)
    for (let i = 0; i < hs / 2; i++) {
      const angle = p * theta ** ((-2 * i) / hs);
      table[p * hs + i] = Math.cos(angle);
      table[p * hs + hs / 2 + i] = Math.sin(angle);
    }
  return table;
}
