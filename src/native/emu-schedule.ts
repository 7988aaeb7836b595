// The emulator's schedule (cuda/emu/emu_exec.cpp, emu_set_schedule): the order in which a launch's blocks, and a
// block's threads between barriers, run. Seed 0 is index order; any other seed a seeded random order.
import { dlopen, FFIType } from "bun:ffi";

export interface EmuSchedule {
  /** every later launch of that library runs in this seed's order */
  set(seed: number): void;
  close(): void;
}

/** The schedule of the emulator library at `path` (the same loaded copy a backend opened from that path). */
export function emuSchedule(path: string): EmuSchedule {
  const lib = dlopen(path, { emu_set_schedule: { args: [FFIType.u64], returns: FFIType.void } });
  return { set: (seed) => lib.symbols.emu_set_schedule(BigInt(seed)), close: () => lib.close() };
}
