// Small C++ programs against the project's headers (cuda/ and the generated ones), compiled and run by a test.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { writeGeneratedHeaders } from "../../src/native/build.ts";

const CUDA_DIR = join(import.meta.dir, "..", "..", "cuda");

/**
 * `source` compiled as C++20 with g++ and `flags`, run with `args`: its stdout. Throws with the compiler's or the
 * program's stderr where either fails.
 */
export function compileAndRun(what: string, source: string, flags: string[] = [], args: string[] = []): string {
  const dir = mkdtempSync(join(tmpdir(), "cpp-"));
  try {
    const exe = join(dir, "program");
    const include = [`-I${CUDA_DIR}`, `-I${writeGeneratedHeaders()}`];
    const build = Bun.spawnSync(["g++", "-std=c++20", ...flags, ...include, "-x", "c++", "-", "-o", exe], {
      cwd: dir,
      stdin: Buffer.from(source),
    });
    if (!build.success) throw new Error(`the ${what} program did not compile:\n${build.stderr.toString()}`);
    const run = Bun.spawnSync([exe, ...args]);
    if (!run.success) throw new Error(`the ${what} program failed:\n${run.stderr.toString()}`);
    return run.stdout.toString();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
