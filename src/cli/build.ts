// bun run build — builds (or finds fresh) every native library this machine can build.
// The CPU and emulation libraries need g++; the CUDA and CUPTI libraries need nvcc and the CUDA toolkit.
import { runCli, UserError } from "../errors.ts";
import { ensureBuilt, hasNvcc, TARGETS, type Target } from "../native/build.ts";

await runCli(() => {
  const quiet = process.argv.includes("--quiet");
  const wanted = process.argv.slice(2).filter((a) => !a.startsWith("--")) as Target[];
  const unknown = wanted.filter((t) => !TARGETS.includes(t));
  if (unknown.length) throw new UserError(`unknown build target ${unknown.join(", ")} (targets: ${TARGETS.join(", ")})`);
  const needsNvcc = (t: Target) => t === "cuda" || t === "cupti";
  const targets = wanted.length ? wanted : TARGETS;
  for (const target of targets) {
    if (needsNvcc(target) && !hasNvcc()) {
      if (wanted.length) throw new UserError(`cannot build ${target}: nvcc not found (set NVCC or CUDA_HOME)`);
      process.stderr.write(`skipping ${target}: nvcc not found\n`);
      continue;
    }
    try {
      const r = ensureBuilt(target, { quiet });
      if (!quiet) process.stderr.write(`${target}: ${r.path} (${r.rebuilt ? "built" : "up to date"})\n`);
    } catch (e) {
      throw new UserError((e as Error).message);
    }
  }
});
