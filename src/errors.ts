/** An error caused by the user's input or environment: printed as one line, exit code 1, never a stack trace. */
export class UserError extends Error {
  override name = "UserError";
  /** the process's exit status: 1, or 128 + the signal's number for an interruption */
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/**
 * Characters that would break a message's one line or reorder what a terminal shows: C0 and C1 controls
 * (NUL, newline, ESC …), DEL, the Unicode line and paragraph separators, and the bidirectional marks,
 * embeddings, overrides and isolates.
 */
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `text` with every unprintable character escaped as \n, \t, \r or \uXXXX: safe to show on one line. */
export function printable(text: string): string {
  const named: Record<string, string> = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };
  return text.replace(UNPRINTABLE, (c) => named[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Runs a CLI main: UserErrors become `error: <message>` on stderr and their exit code; anything else keeps its stack. */
export async function runCli(main: () => Promise<void> | void): Promise<void> {
  try {
    await main();
  } catch (e) {
    if (e instanceof UserError) {
      process.stderr.write(`error: ${printable(e.message)}\n`);
      process.exit(e.exitCode);
    }
    throw e;
  }
}
