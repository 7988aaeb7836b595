/** An error caused by the user's input or environment: printed as one line, exit code 1, never a stack trace. */
export class UserError extends Error {
  override name = "UserError";
}

/** Runs a CLI main: UserErrors become `error: <message>` on stderr and exit 1; anything else keeps its stack. */
export async function runCli(main: () => Promise<void> | void): Promise<void> {
  try {
    await main();
  } catch (e) {
    if (e instanceof UserError) {
      process.stderr.write(`error: ${e.message}\n`);
      process.exit(1);
    }
    throw e;
  }
}
