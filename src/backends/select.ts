// Choosing a backend: `cuda` must work or fail with one line; `auto` falls back to the CPU with a visible note.
import { UserError } from "../errors.ts";
import type { Backend } from "./backend.ts";
import { CpuBackend } from "./cpu.ts";

export const BACKEND_CHOICES = ["auto", "cpu", "cuda", "emu"] as const;
export type BackendChoice = (typeof BACKEND_CHOICES)[number];

export interface OpenOptions {
  threads?: number;
  /** where `auto`'s fallback note goes (stderr by default) */
  note?: (line: string) => void;
}

async function openCuda(emulated: boolean): Promise<Backend> {
  const { CudaBackend } = await import("./cuda.ts");
  return CudaBackend.open({ emulated });
}

/** The CPU backend with `threads` threads: at most the CPUs this process may run on (more only queue for them). */
function openCpu(threads: number | undefined): CpuBackend {
  const backend = CpuBackend.open();
  if (threads === undefined) return backend;
  const available = backend.threads;
  if (threads > available) {
    backend.close();
    throw new UserError(
      `--threads ${threads}: this process may run on ${available} CPU${available === 1 ? "" : "s"}; give 1..${available}`,
    );
  }
  backend.setThreads(threads);
  return backend;
}

export async function openBackend(choice: BackendChoice, opts: OpenOptions = {}): Promise<Backend> {
  const note = opts.note ?? ((line: string) => process.stderr.write(`${line}\n`));
  if (opts.threads !== undefined && (choice === "cuda" || choice === "emu"))
    throw new UserError(`--threads sets the CPU backend's threads; --backend ${choice} has none to set`);
  switch (choice) {
    case "cpu":
      return openCpu(opts.threads);
    case "cuda":
      return openCuda(false);
    case "emu":
      return openCuda(true);
    case "auto":
      try {
        const cuda = await openCuda(false);
        if (opts.threads !== undefined)
          note("note: --threads sets the CPU backend's threads; the GPU's run without them");
        return cuda;
      } catch (e) {
        if (!(e instanceof UserError)) throw e;
        note(`note: ${e.message}; using the CPU backend`);
        return openCpu(opts.threads);
      }
  }
}
