// bun run format — formats the code in place: Biome for TypeScript and JSON (biome.jsonc, which also lints), clang-format
// for C++ and CUDA (.clang-format). test/format.test.ts checks both without writing.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

import { runCli, UserError } from "../errors.ts";

const ROOT = join(import.meta.dir, "../..");
const BIN = join(ROOT, "node_modules/.bin");
const CPP_DIRS = ["cuda", "test/relacy"];
const CPP_SOURCE = /\.(cu|cuh|h|cpp)$/;

/** The C++ and CUDA sources: every such file under cuda/ and test/relacy/. */
export function cppSources(): string[] {
  return CPP_DIRS.flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" })
      .filter((f) => CPP_SOURCE.test(f))
      .map((f) => join(ROOT, dir, f))
      .sort(),
  );
}

const run = (tool: string, args: string[]) =>
  spawnSync(join(BIN, tool), args, { cwd: ROOT, encoding: "utf8", maxBuffer: 64 << 20 });

/** Biome's report of what it would reformat or flags (empty: nothing). */
export function biomeProblems(): string {
  const r = run("biome", ["ci", "--colors=off", "--max-diagnostics=50", "."]);
  if (r.error) throw r.error;
  return r.status === 0 ? "" : `${r.stdout}${r.stderr}`.trim();
}

/** Those of `files` that clang-format would change (one run over all of them). */
export function unformattedCpp(files: string[]): string[] {
  const r = run("clang-format", [`--style=file:${join(ROOT, ".clang-format")}`, "--dry-run", "--Werror", ...files]);
  if (r.error) throw r.error;
  const flagged = new Set([...r.stderr.matchAll(/^(.+?):\d+:\d+: error:/gm)].map((m) => m[1]!));
  if (r.status !== 0 && flagged.size === 0) throw new Error(`clang-format failed: ${r.stderr.trim()}`);
  return files.filter((f) => flagged.has(f));
}

if (import.meta.main) {
  await runCli(async () => {
    const biome = run("biome", ["check", "--write", "--colors=off", "."]);
    if (biome.status !== 0) throw new UserError(`biome left problems to fix by hand:\n${biome.stdout}${biome.stderr}`);
    const files = cppSources();
    const cpp = run("clang-format", [`--style=file:${join(ROOT, ".clang-format")}`, "-i", ...files]);
    if (cpp.status !== 0) throw new UserError(`clang-format failed: ${cpp.stderr.trim()}`);
    process.stderr.write(`formatted the TypeScript and JSON, and ${files.length} C++/CUDA files\n`);
  });
}
