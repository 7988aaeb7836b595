// A model's parameters as every architecture streams them: each one's name, shape and initialisation, the
// visitor that receives them chunk by chunk, the seeded initialisation, and a transposition for layouts that
// need one. No architecture's own names here (gpt2.ts, llama.ts).
import { CHUNK_ELEMENTS, numel } from "./safetensors.ts";

export type Init = "normal" | "zeros" | "ones";

/** One parameter: its Hugging Face name (no prefix), shape, and how a fresh one starts. */
export interface ParameterSpec {
  name: string;
  shape: number[];
  init: Init;
  /** a linear layer's weight, input-first (in, out): a backend holds it in its own layout (Backend.uploadMatrix) */
  linear?: boolean;
}

/** Receives elements [offset, offset + chunk.length) of parameter `spec`; the chunk is reused after it returns. */
export type ChunkVisitor = (spec: ParameterSpec, chunk: Float32Array, offset: number) => void;

/**
 * Streams `specs` initialised as each says (N(0, 0.02), ones, zeros), chunk by chunk from one generator seeded with
 * `seed`, in order: the same values every time.
 */
export function streamSeeded(specs: readonly ParameterSpec[], seed: number, visit: ChunkVisitor): void {
  const rng = new Xoshiro128ss(seed);
  const staging = new Float32Array(CHUNK_ELEMENTS);
  for (const spec of specs) {
    const n = numel(spec.shape);
    for (let offset = 0; offset < n; offset += CHUNK_ELEMENTS) {
      const chunk = staging.subarray(0, Math.min(CHUNK_ELEMENTS, n - offset));
      if (spec.init === "normal") rng.fillNormal(chunk, 0.02);
      else chunk.fill(spec.init === "ones" ? 1 : 0);
      visit(spec, chunk, offset);
    }
  }
}

/** out: (cols, rows) = a: (rows, cols) transposed */
export function transposed(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c]!;
  return out;
}

/** xoshiro128** (Blackman & Vigna), seeded through splitmix32. */
export class Xoshiro128ss {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    let x = (seed >>> 0) ^ Math.imul(Math.floor(seed / 2 ** 32), 0x9e3779b9);
    const splitmix32 = (): number => {
      x = (x + 0x9e3779b9) | 0;
      let z = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return z ^ (z >>> 16);
    };
    [this.s0, this.s1, this.s2, this.s3] = [splitmix32(), splitmix32(), splitmix32(), splitmix32()];
  }

  /** 32 random bits as a signed int32. */
  nextInt32(): number {
    const r = Math.imul(this.s1, 5);
    const result = Math.imul((r << 7) | (r >>> 25), 9);
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = (this.s3 << 11) | (this.s3 >>> 21);
    return result;
  }

  /** Uniform in (0, 1). */
  nextOpenUnit(): number {
    return ((this.nextInt32() >>> 0) + 0.5) / 2 ** 32;
  }

  /** Fills `out` with N(0, std) samples. */
  fillNormal(out: Float32Array, std: number): void {
    for (let i = 0; i < out.length; i++) out[i] = std * this.normal();
  }

  /**
   * A standard normal sample by Marsaglia & Tsang's ziggurat (128 layers): one 32-bit draw and a table compare
   * in ~99% of cases. Low 7 bits pick the layer, the high 25 bits (signed) the position in it.
   */
  private normal(): number {
    const z = ZIGGURAT;
    for (;;) {
      const u = this.nextInt32();
      const layer = u & 127;
      const j = u >> 7; // in [-2^24, 2^24)
      const x = j * z.w[layer]!;
      if (Math.abs(j) < z.k[layer]!) return x; // inside the layer's rectangle core
      if (layer === 0) return this.tail(j < 0);
      const y = z.f[layer]! + this.nextOpenUnit() * (z.f[layer - 1]! - z.f[layer]!);
      if (y < Math.exp(-0.5 * x * x)) return x; // under the density in the wedge
    }
  }

  /** A sample from the tail beyond ±R (Marsaglia's exponential method). */
  private tail(negative: boolean): number {
    let x: number, y: number;
    do {
      x = -Math.log(this.nextOpenUnit()) / ZIGGURAT_R;
      y = -Math.log(this.nextOpenUnit());
    } while (y + y < x * x);
    return negative ? -(ZIGGURAT_R + x) : ZIGGURAT_R + x;
  }
}

/** Right edge of the base layer and the common layer area of the 128-layer normal ziggurat. */
const ZIGGURAT_R = 3.442619855899;
const ZIGGURAT_V = 9.91256303526217e-3;

/** Layer tables for 25-bit signed positions: k acceptance bounds, w position→x scale, f density at each layer edge. */
const ZIGGURAT = ((): { k: Float64Array; w: Float64Array; f: Float64Array } => {
  const m = 2 ** 24;
  const k = new Float64Array(128),
    w = new Float64Array(128),
    f = new Float64Array(128);
  const density = (x: number) => Math.exp(-0.5 * x * x);
  let dn = ZIGGURAT_R,
    tn = dn;
  const q = ZIGGURAT_V / density(dn);
  k[0] = (dn / q) * m;
  k[1] = 0;
  w[0] = q / m;
  w[127] = dn / m;
  f[0] = 1;
  f[127] = density(dn);
  for (let i = 126; i >= 1; i--) {
    dn = Math.sqrt(-2 * Math.log(ZIGGURAT_V / dn + density(dn)));
    k[i + 1] = (dn / tn) * m;
    tn = dn;
    f[i] = density(dn);
    w[i] = dn / m;
  }
  return { k, w, f };
})();
