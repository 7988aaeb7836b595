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

export async function openBackend(choice: BackendChoice, opts: OpenOptions = {}): Promise<Backend> {
  const note = opts.note ?? ((line: string) => process.stderr.write(`${line}\n`));
  switch (choice) {
    case "cpu":
      return CpuBackend.open(opts.threads);
    case "cuda":
      return openCuda(false);
    case "emu":
      return openCuda(true);
    case "auto":
      try {
        return await openCuda(false);
      } catch (e) {
        if (!(e instanceof UserError)) throw e;
        note(`note: ${e.message}; using the CPU backend`);
        return CpuBackend.open(opts.threads);
      }
  }
}
