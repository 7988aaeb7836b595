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
const CBLAS_TRANS = 112;

export interface OpenBlas {
  /** the library's own description (version, core it chose, threading) */
  config: string;
  /**
   * out (M, N) = a (M, K) @ b (N, K)^T, row-major, on `threads` threads; pointers are host addresses. b is
   * out-major, as the CPU library holds a linear layer's weight (cuda/runtime.h be_upload_matrix).
   */
  sgemm(out: number, a: number, b: number, M: number, N: number, K: number): void;
  close(): void;
}

/**
 * 2^n cycles OpenBLAS's (pthreads build's) threads spin after a call before they sleep (read when the library
 * loads, clamped to 4..30; its default, 2^28, is ~0.1 s). Spinning on after their call, they took the vCPUs from ours: timed in turn, the median of our
 * 128 × 768 → 3072 product doubled in 22 of 40 tries (0 of 40 at 2^4), while OpenBLAS's own times did not change.
 */
const THREAD_TIMEOUT_LOG2 = "4";

/**
 * NAME=value in the C environment unless the user set NAME (Bun's process.env does not reach getenv); NAME's
 * value there afterwards, or null where no glibc was found to ask.
 */
function setNativeEnvDefault(name: string, value: string): string | null {
  const symbols = {
    setenv: { args: [ptr, ptr, i32], returns: i32 },
    getenv: { args: [ptr], returns: FFIType.cstring },
  } as const;
  let libc: ReturnType<typeof dlopen<typeof symbols>>;
  try {
    libc = dlopen("libc.so.6", symbols);
  } catch {
    return null;
  }
  try {
    const key = Buffer.from(`${name}\0`);
    libc.symbols.setenv(key, Buffer.from(`${value}\0`), 0);
    const now = libc.symbols.getenv(key);
    return now === null ? null : String(now);
  } finally {
    libc.close();
  }
}

/** How OpenBLAS's threads wait after a call, as this process set it up (its config names an OpenMP build). */
function spinNote(config: string, timeout: string | null): string {
  if (/USE_OPENMP/.test(config))
    return "an OpenMP build: OMP_WAIT_POLICY, not OPENBLAS_THREAD_TIMEOUT, decides how its threads wait";
  if (timeout === null)
    return "its threads spin as long as its default says (no glibc found to set OPENBLAS_THREAD_TIMEOUT)";
  if (timeout === THREAD_TIMEOUT_LOG2)
    return `OPENBLAS_THREAD_TIMEOUT=${timeout}: its threads sleep right after a call`;
  return `OPENBLAS_THREAD_TIMEOUT=${timeout}, as set by the user`;
}

/** OpenBLAS on `threads` threads from the first of `candidates` that loads, or why none did. */
export function openOpenBlas(threads: number, candidates = CANDIDATES): OpenBlas | { missing: string } {
  const timeout = setNativeEnvDefault("OPENBLAS_THREAD_TIMEOUT", THREAD_TIMEOUT_LOG2);
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
      const config = s.openblas_get_config().toString().trim();
      return {
        config: `${config} (${path}; ${spinNote(config, timeout)})`,
        sgemm: (out, a, b, M, N, K) =>
          s.cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, M, N, K, 1, a, K, b, K, 0, out, N),
        close: () => lib.close(),
      };
    } catch (e) {
      tried.push(`${path}: ${(e as Error).message.split("\n")[0]}`);
    }
  }
  return { missing: `OpenBLAS not found (${tried[0]}); apt-get install libopenblas0 to compare against its sgemm` };
}
