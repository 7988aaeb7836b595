// Storing weights in a narrower type: fp32 values rounded to bf16 or f16 (nearest, ties to even — what the
// kernels do when they store a KV cache row, cuda/ops.h), and widened back exactly.
import { UserError } from "../errors.ts";
import { DTYPE_BYTES, DTYPES, type DtypeName } from "../ops.ts";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bf16 bits of x: the top half of its fp32 bits, rounded to nearest even (NaN stays a quiet NaN). */
export function bf16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return (bits >>> 16) | 0x0040;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The value of bf16 bits, exactly. */
export function bf16Value(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** x as the dtype stores it, widened back: what a kernel computes with after a load. */
export function roundTo(dtype: DtypeName, x: number): number {
  if (dtype === "bf16") return bf16Value(bf16Bits(x));
  if (dtype === "f16") return Math.f16round(x);
  return Math.fround(x);
}

/** Rounds `values` in place to what `dtype` holds (for float64 references on the rounded weights). */
export function roundInPlace(dtype: DtypeName, values: Float32Array): Float32Array {
  for (let i = 0; i < values.length; i++) values[i] = roundTo(dtype, values[i]!);
  return values;
}

/** Values in a storage type's words: fp32, f16, or bf16's bits. */
export type StoredWords = Float32Array | Float16Array | Uint16Array;

/**
 * Converts fp32 chunks to a storage type's bytes, through one reusable buffer. A finite value that the type
 * cannot hold (|x| > 65504 in f16, > ~3.4e38 in bf16) is a UserError naming `what`: it would become ±Inf.
 */
export class StorageConverter {
  private buffer = new ArrayBuffer(0);

  constructor(readonly dtype: DtypeName) {}

  get bytesPerElement(): number {
    return DTYPE_BYTES[this.dtype];
  }

  /** The chunk's values in the storage type (a view of the reused buffer for bf16/f16; the chunk itself for f32). */
  convert(chunk: Float32Array, what: () => string): StoredWords {
    if (this.dtype === "f32") return chunk;
    if (this.buffer.byteLength < chunk.length * 2) this.buffer = new ArrayBuffer(chunk.length * 2);
    if (this.dtype === "f16") {
      const out = new Float16Array(this.buffer, 0, chunk.length);
      out.set(chunk);
      for (let i = 0; i < out.length; i++) if (!Number.isFinite(out[i]!)) throw this.overflow(chunk[i]!, what);
      return out;
    }
    const out = new Uint16Array(this.buffer, 0, chunk.length);
    for (let i = 0; i < chunk.length; i++) {
      const bits = bf16Bits(chunk[i]!);
      if ((bits & 0x7f80) === 0x7f80) throw this.overflow(chunk[i]!, what);
      out[i] = bits;
    }
    return out;
  }

  private overflow(x: number, what: () => string): UserError {
    return new UserError(
      `${what()}: the value ${x} does not fit ${this.dtype} (it would be ±Inf); store the weights as f32`,
    );
  }
}

/** The DTYPES code of a dtype name. */
export const dtypeCode = (name: DtypeName): number => DTYPES[name];
