// Running a command line tool as a user types it: `bun src/cli/<name>.ts ARGS` from the project root, plain
// text (NO_COLOR), its exit code and both streams.
import { join } from "node:path";

export const ROOT = join(import.meta.dir, "../..");

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** `bun src/cli/<name>.ts ...args`, with `env` added to this process's environment (undefined removes a name). */
export function runCli(name: string, args: readonly string[], env: Record<string, string | undefined> = {}): CliRun {
  const p = Bun.spawnSync([process.execPath, join(ROOT, `src/cli/${name}.ts`), ...args], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: "1", ...env },
  });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}
