// Comparing a backend's outputs with a reference, and the inputs such comparisons run on.

/** max |got - want| / max |want| (NaN anywhere → Infinity, so an unwritten poisoned element fails) */
export function maxRelativeError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new Error(`length ${got.length} != ${want.length}`);
  let maxDiff = 0;
  let maxRef = 0;
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i]! - want[i]!);
    if (Number.isNaN(d)) return Infinity;
    maxDiff = Math.max(maxDiff, d);
    maxRef = Math.max(maxRef, Math.abs(want[i]!));
  }
  return maxDiff / Math.max(maxRef, 1e-30);
}

/** A seeded generator of uniform floats in [-scale, scale) (mulberry32). */
export function randomFloats(n: number, seed: number, scale = 1): Float32Array {
  let a = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1) * scale;
  }
  return out;
}

export const NAN_WORD = 0x7fc00000;
