// OpenBLAS's cblas_sgemm through bun:ffi, found at run time — the yardstick `bench cpu --prefill` holds the
// many-rows linear against. Optional: a machine without it (Debian: apt-get install libopenblas0) gets null.
import { dlopen, FFIType } from "bun:ffi";

const { ptr, i32, f32, void: v } = FFIType;

/** Where Debian and most distributions put it (the first is the alternatives' choice). */
const CANDIDATES = [
  "libopenblas.so.0",
  "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
  "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
  "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
];

const SYMBOLS = {
  cblas_sgemm: { args: [i32, i32, i32, i32, i32, i32, f32, ptr, i32, ptr, i32, f32, ptr, i32], returns: v },
  openblas_set_num_threads: { args: [i32], returns: v },
  openblas_get_config: { args: [], returns: FFIType.cstring },
} as const;

const CBLAS_ROW_MAJOR = 101;
const CBLAS_NO_TRANS = 111;

export interface OpenBlas {
  /** the library's own description (version, core it chose, threading) */
  config: string;
  /** out (M, N) = a (M, K) @ b (K, N), row-major, on `threads` threads; pointers are host addresses */
  sgemm(out: number, a: number, b: number, M: number, N: number, K: number): void;
  close(): void;
}

/** OpenBLAS on `threads` threads from the first of `candidates` that loads, or why none did. */
export function openOpenBlas(threads: number, candidates = CANDIDATES): OpenBlas | { missing: string } {
  const tried: string[] = [];
  for (const path of candidates) {
    try {
      const lib = dlopen(path, SYMBOLS);
      const s = lib.symbols as unknown as {
        cblas_sgemm(...args: number[]): void;
        openblas_set_num_threads(n: number): void;
        openblas_get_config(): { toString(): string };
      };
      s.openblas_set_num_threads(threads);
      return {
        config: `${s.openblas_get_config().toString().trim()} (${path})`,
        sgemm: (out, a, b, M, N, K) => s.cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, M, N, K, 1, a, K, b, N, 0, out, N),
        close: () => lib.close(),
      };
    } catch (e) {
      tried.push(`${path}: ${(e as Error).message.split("\n")[0]}`);
    }
  }
  return { missing: `OpenBLAS not found (${tried[0]}); apt-get install libopenblas0 to compare against its sgemm` };
}
