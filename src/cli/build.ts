// bun run build — builds (or finds fresh) every native library this machine can build.
// The CPU and emulation libraries need g++; the CUDA and CUPTI libraries need nvcc and the CUDA toolkit.
import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { runCli, UserError } from "../errors.ts";
import { ensureBuilt, hasNvcc, hasPrebuilt, TARGETS, type Target } from "../native/build.ts";
import { parseFlags } from "./common.ts";

const needsNvcc = (t: Target) => t === "cuda" || t === "cupti";

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run build")
      .command("$0 [targets..]", "builds the named native libraries (default: all that this machine can)", (y) =>
        y.positional("targets", { choices: TARGETS, array: true, describe: "libraries to build" }),
      )
      .option("quiet", { type: "boolean", default: false, describe: "print nothing but errors" }),
    ["targets"],
  );
  const wanted = [...new Set((argv.targets ?? []) as Target[])];
  const targets = wanted.length ? wanted : TARGETS;
  for (const target of targets) {
    if (needsNvcc(target) && !hasNvcc() && !hasPrebuilt(target)) {
      if (wanted.length) throw new UserError(`cannot build ${target}: nvcc not found (set NVCC or CUDA_HOME)`);
      if (!argv.quiet) process.stderr.write(`skipping ${target}: nvcc not found\n`);
      continue;
    }
    try {
      const r = ensureBuilt(target, { quiet: argv.quiet });
      if (!argv.quiet) process.stderr.write(`${target}: ${r.path} (${r.rebuilt ? "built" : "up to date"})\n`);
    } catch (e) {
      throw new UserError((e as Error).message);
    }
  }
});
