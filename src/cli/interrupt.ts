// SIGINT and SIGTERM during a long command: the work loop yields to the event loop now and then (a signal
// handler only runs there), and at the next safe point the command stops with one line and exit 130 / 143,
// after its `finally` blocks have released the backend and removed anything half-written.
import { UserError } from "../errors.ts";

const SIGNAL_EXIT = { SIGINT: 130, SIGTERM: 143 } as const;
type Caught = keyof typeof SIGNAL_EXIT;
/** At most this long between yields to the event loop: how promptly a signal is noticed, at no measurable cost. */
const YIELD_EVERY_MS = 50;

export interface Interrupt {
  /** A safe point: yields if enough time passed, then throws the interruption if a signal came. */
  checkpoint(): Promise<void>;
  dispose(): void;
}

export function watchSignals(): Interrupt {
  let caught: Caught | null = null;
  const handlers = (Object.keys(SIGNAL_EXIT) as Caught[]).map(
    (sig) =>
      [
        sig,
        () => {
          caught ??= sig;
        },
      ] as const,
  );
  for (const [sig, handler] of handlers) process.on(sig, handler);
  let lastYield = performance.now();
  return {
    async checkpoint() {
      if (performance.now() - lastYield >= YIELD_EVERY_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        lastYield = performance.now();
      }
      if (caught) throw new UserError(`interrupted by ${caught}: stopped, nothing written`, SIGNAL_EXIT[caught]);
    },
    dispose() {
      for (const [sig, handler] of handlers) process.off(sig, handler);
    },
  };
}
