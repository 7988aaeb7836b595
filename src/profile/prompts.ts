// The study's prompts: deterministic token ids, the same on every backend and in every run with the same seed.

/** A deterministic prompt of n token ids. */
export function promptOf(n: number, vocab: number, seed: number): number[] {
  return Array.from({ length: n }, (_, i) => (Math.imul(i + 1 + seed, 2654435761) >>> 0) % vocab);
}
