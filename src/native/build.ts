// Builds the native libraries when missing or stale (a stamp holds a hash of sources, flags and compiler;
// with DECODE_FLOOR_CARRIED=1, a library whose sources hash matches is used as built: see stampOf).
//   cpu  — the CPU backend: the CPU twins cuda/*.cpp + the shared op table, g++ (its own thread pool; OpenMP only for simd)
//   cuda — the CUDA backend: cuda/*.cu kernels + runtime, nvcc for sm_90 plus PTX (other GPUs JIT; DECODE_FLOOR_CUDA_PTX=0: none)
//   emu  — the same .cu sources compiled by g++ against cuda/emu/cuda_emu.h: the kernels' code on the CPU (from a copy
//          under build/emu-src/ whose shared-memory declarations are each emulated block's own: emu-source.ts)
//   cupti — the CUPTI tracer, its own library so the CUDA one loads without CUPTI
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";

import { opTableHeader } from "../ops.ts";
import { emuSource } from "./emu-source.ts";

/** The project root; DECODE_FLOOR_ROOT overrides it for bundled copies of the CLI (see scripts/device-check.sh). */
export const ROOT = process.env.DECODE_FLOOR_ROOT ?? resolve(import.meta.dir, "../..");
export const BUILD_DIR = join(ROOT, "build");
const CUDA_DIR = join(ROOT, "cuda");
/** Headers generated from TypeScript sources (op_table.h from src/ops.ts). */
const GENERATED_INCLUDE = join(BUILD_DIR, "include");
/** The emulator's copies of cuda/ (emu-source.ts), laid out as there so that includes resolve among the copies. */
const EMU_SOURCES = join(BUILD_DIR, "emu-src");
export const CUDA_HOME = process.env.CUDA_HOME ?? "/usr/local/cuda";
const NVCC = process.env.NVCC ?? (existsSync(join(CUDA_HOME, "bin/nvcc")) ? join(CUDA_HOME, "bin/nvcc") : "nvcc");
/** Set to 1 where libraries travelled with their stamps (scripts/device-check.sh on a lent GPU): see stampOf. */
export const CARRIED_ENV = "DECODE_FLOOR_CARRIED";
/**
 * Set to 0 to build the CUDA library without the PTX that lets GPUs newer than sm_90 compile it as it loads: the
 * library a lent sm_90 GPU is sent (scripts/device-check.sh), within the device's transfer limit.
 */
const CUDA_PTX_ENV = "DECODE_FLOOR_CUDA_PTX";
/** Whether the CUDA library is built with PTX beside its sm_90 code (CUDA_PTX_ENV). */
export const cudaWithPtx = () => process.env[CUDA_PTX_ENV] !== "0";

export type Target = "cpu" | "cuda" | "emu" | "cupti";
export const TARGETS: Target[] = ["cpu", "emu", "cuda", "cupti"];

export function libraryPath(target: Target, variant = ""): string {
  return join(BUILD_DIR, `libgpt2_${target}${variant ? `_${variant}` : ""}.so`);
}

function filesIn(dir: string, ext: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(ext))
    .sort()
    .map((f) => join(dir, f));
}

const headers = () => ["", "emu", "cupti"].flatMap((sub) => filesIn(join(CUDA_DIR, sub), ".h"));

/** Writes build/include/op_table.h from the op table when its text changed (the stamps hash its text); returns the folder. */
export function writeGeneratedHeaders(): string {
  const path = join(GENERATED_INCLUDE, "op_table.h");
  const text = opTableHeader();
  if (existsSync(path) && readFileSync(path, "utf8") === text) return GENERATED_INCLUDE;
  mkdirSync(GENERATED_INCLUDE, { recursive: true });
  writeFileSync(path, text);
  return GENERATED_INCLUDE;
}
const cpuTwins = () =>
  filesIn(CUDA_DIR, ".cpp").filter((f) => !f.endsWith("/plan.cpp") && !f.endsWith("/cpu_runtime.cpp"));
const kernelSources = () => filesIn(CUDA_DIR, ".cu");

interface Recipe {
  sources: string[];
  /** the compiler and the flags the stamp hashes: the same wherever the project is */
  command: (out: string) => string[];
  /** the flags that say where this machine keeps a dependency, appended to the command and not hashed */
  located?: (say: (line: string) => void) => string[];
  /** files the build writes before compiling (the emulator's copies of the sources), hashed into the stamp */
  generated?: () => { path: string; text: string }[];
}

/** Writes `text` to `path` unless it already holds it (renamed into place: a concurrent build reads old or new). */
function writeIfChanged(path: string, text: string): void {
  if (existsSync(path) && readFileSync(path, "utf8") === text) return;
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

/** Files under `root` (links followed, each folder once) whose name passes `match`, the shallowest first. */
function findUnder(root: string, match: (name: string) => boolean, maxDepth = 8): string[] {
  const found: string[] = [];
  const seen = new Set<string>();
  const walk = (dir: string, depth: number) => {
    let real: string;
    try {
      real = realpathSync(dir);
    } catch {
      return; // a dangling link
    }
    if (seen.has(real) || depth > maxDepth) return;
    seen.add(real);
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      let isDir: boolean;
      try {
        isDir = statSync(path).isDirectory();
      } catch {
        continue;
      }
      if (isDir) walk(path, depth + 1);
      else if (match(name)) found.push(path);
    }
  };
  if (existsSync(root)) walk(root, 0);
  const depth = (p: string) => p.split("/").length;
  return found.sort((a, b) => depth(a) - depth(b) || a.localeCompare(b));
}

/**
 * CUPTI's header and library, anywhere under CUDA_HOME (beside the toolkit's own, under extras/CUPTI or
 * targets/<arch>: installs differ): -I, -L, the rpath and the library to link, said once when building.
 */
function locateCupti(say: (line: string) => void): string[] {
  const found = findUnder(CUDA_HOME, (n) => n === "cupti.h" || n.startsWith("libcupti.so"));
  const header = found.find((p) => basename(p) === "cupti.h");
  // the unversioned name is what -lcupti finds; a toolkit with only libcupti.so.N is linked by that name
  const libs = found.filter((p) => basename(p) !== "cupti.h");
  const lib = libs.find((p) => basename(p) === "libcupti.so") ?? libs[0];
  if (!header || !lib)
    throw new Error(`build cupti: no ${header ? "libcupti.so*" : "cupti.h"} under ${CUDA_HOME} (set CUDA_HOME)`);
  say(`cupti: header ${header}, library ${lib}`);
  const libDir = dirname(lib);
  const link = basename(lib) === "libcupti.so" ? "-lcupti" : `-l:${basename(lib)}`;
  return [`-I${dirname(header)}`, `-L${libDir}`, `-Wl,-rpath,${libDir}`, link];
}

function recipe(target: Target): Recipe {
  const plan = join(CUDA_DIR, "plan.cpp");
  switch (target) {
    case "cpu": {
      const sources = [...cpuTwins(), plan, join(CUDA_DIR, "cpu_runtime.cpp")];
      // No -z nodelete: dlclose() runs the library's destructors, which join its thread pool's workers first
      // (libgomp's threads could not be joined, and unmapping the library under them crashed at exit).
      const flags = [
        "-O3",
        "-march=native",
        "-fopenmp-simd",
        "-fPIC",
        "-shared",
        "-std=c++20",
        "-Wall",
        "-Wextra",
        "-Werror",
        `-I${GENERATED_INCLUDE}`,
      ];
      return { sources, command: (out) => ["g++", ...flags, ...sources, "-o", out] };
    }
    case "emu": {
      const emuDir = join(CUDA_DIR, "emu");
      const sources = [...kernelSources(), ...filesIn(emuDir, ".cpp"), plan];
      // every file is compiled from its copy, headers included
      const copy = (f: string) => join(EMU_SOURCES, relative(CUDA_DIR, f));
      const copied = [...sources, ...filesIn(CUDA_DIR, ".h"), ...filesIn(emuDir, ".h")];
      const flags = [
        "-O2",
        "-g",
        "-fPIC",
        "-shared",
        "-std=c++20",
        "-Wall",
        "-Werror",
        "-Wno-unknown-pragmas",
        `-I${copy(emuDir)}`,
        `-I${GENERATED_INCLUDE}`,
      ];
      // .cu files are compiled as C++ with the emulation header forced in first
      const cu = kernelSources().flatMap((f) => ["-x", "c++", "-include", copy(join(emuDir, "cuda_emu.h")), copy(f)]);
      const rest = [...filesIn(emuDir, ".cpp"), plan].map(copy);
      return {
        sources,
        command: (out) => ["g++", ...flags, ...cu, "-x", "none", ...rest, "-o", out, "-lpthread"],
        generated: () => copied.map((f) => ({ path: copy(f), text: emuSource(readFileSync(f, "utf8"), f) })),
      };
    }
    case "cuda": {
      const sources = [...kernelSources(), plan];
      const flags = [
        "-O3",
        "-std=c++20",
        "-shared",
        "-Xcompiler",
        "-fPIC,-Wall,-Werror",
        "-gencode",
        "arch=compute_90,code=sm_90",
        ...(cudaWithPtx() ? ["-gencode", "arch=compute_90,code=compute_90"] : []),
        // the fatbin compressed for size: the library 7.7 MB rather than 27 (2026-12-06)
        "--compress-mode=size",
        "--resource-usage",
        "-Werror",
        "all-warnings",
        "-lineinfo",
        `-I${GENERATED_INCLUDE}`,
      ];
      return { sources, command: (out) => [NVCC, ...flags, ...sources, "-o", out] };
    }
    case "cupti": {
      const sources = filesIn(join(CUDA_DIR, "cupti"), ".cpp");
      const flags = ["-O2", "-fPIC", "-shared", "-std=c++20", "-Wall", "-Werror"];
      // CUPTI's folders come last: the library after the sources that need it
      return { sources, command: (out) => ["g++", ...flags, ...sources, "-o", out], located: locateCupti };
    }
  }
}

/**
 * A library's stamp: the hash of its sources, headers and flags (paths relative to the project and the
 * toolkit, and not the located flags, so a copy of the project elsewhere hashes the same), then that with
 * the compiler's version. A library is up to date when both match. A library built elsewhere is used when
 * its sources hash matches where the compiler is missing (a GPU machine without nvcc), and also, whatever
 * compiler is present, where DECODE_FLOOR_CARRIED=1: the lent GPU's run uses the libraries built and checked
 * here rather than rebuilding them under its own compilers (a new warning there fails -Werror, another
 * ptxas's schedule can fail the SASS checks).
 */
function stampOf(r: Recipe, compilerVersion: string): { full: string; sources: string } {
  const portable = (s: string) => s.split(ROOT).join("<root>").split(CUDA_HOME).join("<cuda>");
  const h = createHash("sha256");
  h.update(portable(r.command("OUT").slice(1).join(" "))); // the flags, not where the compiler is
  for (const f of [...r.sources, ...headers()]) h.update(portable(f)).update(readFileSync(f));
  for (const g of r.generated?.() ?? []) h.update(portable(g.path)).update(portable(g.text));
  h.update(opTableHeader());
  const sources = h.digest("hex");
  return { full: createHash("sha256").update(compilerVersion).update(sources).digest("hex"), sources };
}

function readStamp(file: string): { full: string; sources: string } | null {
  if (!existsSync(file)) return null;
  const [full = "", sources = ""] = readFileSync(file, "utf8").split("\n");
  return { full, sources };
}

/** The compiler's version text, or "" where it does not run. */
function compilerVersion(target: Target): string {
  const exe = target === "cuda" ? NVCC : "g++";
  try {
    const p = Bun.spawnSync([exe, "--version"]);
    return p.success ? p.stdout.toString() : "";
  } catch {
    return ""; // not there at all
  }
}

/** Whether a library of `target` built from these sources is in place (built elsewhere, say, and carried here). */
export function hasPrebuilt(target: Target): boolean {
  const r = recipe(target);
  const out = libraryPath(target);
  return r.sources.length > 0 && existsSync(out) && readStamp(`${out}.stamp`)?.sources === stampOf(r, "").sources;
}

export function hasNvcc(): boolean {
  try {
    return Bun.spawnSync([NVCC, "--version"]).success;
  } catch {
    return false;
  }
}

export interface BuildResult {
  target: Target;
  path: string;
  rebuilt: boolean;
  log: string;
}

/** Builds `target` if its stamp is missing or stale. Throws an Error whose message is one line plus the compiler's output. */
export interface BuildOptions {
  quiet?: boolean;
  /** extra compiler flags (e.g. -DPLANT_BUG_ATTENTION for a test), built as a separate variant library */
  extraFlags?: string[];
  variant?: string;
}

export function ensureBuilt(target: Target, opts: BuildOptions = {}): BuildResult {
  const base = recipe(target);
  const extra = opts.extraFlags ?? [];
  const r: Recipe = {
    ...base,
    command: (o) => {
      const c = base.command(o);
      return [c[0]!, ...extra, ...c.slice(1)];
    },
  };
  const out = libraryPath(target, opts.variant);
  if (r.sources.length === 0) throw new Error(`build ${target}: no sources found under ${CUDA_DIR}`);
  writeGeneratedHeaders();
  const version = compilerVersion(target);
  const stamp = stampOf(r, version);
  const stampFile = `${out}.stamp`;
  const built = existsSync(out) ? readStamp(stampFile) : null;
  const carried = process.env[CARRIED_ENV] === "1";
  if ((!version || carried) && built?.sources === stamp.sources) return { target, path: out, rebuilt: false, log: "" }; // built elsewhere
  if (!version)
    throw new Error(
      `build ${target}: compiler not found (${target === "cuda" ? NVCC : "g++"}), and no library built from these sources`,
    );
  if (built?.full === stamp.full) return { target, path: out, rebuilt: false, log: "" };
  mkdirSync(BUILD_DIR, { recursive: true });
  const say = (line: string) => {
    if (!opts.quiet) process.stderr.write(`${line}\n`);
  };
  say(`building ${target} library…`);
  for (const g of r.generated?.() ?? []) writeIfChanged(g.path, g.text);
  const tmp = `${out}.tmp`;
  const p = Bun.spawnSync([...r.command(tmp), ...(r.located?.(say) ?? [])], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
  });
  const log = p.stdout.toString() + p.stderr.toString();
  if (!p.success) throw new Error(`build ${target} failed (exit ${p.exitCode}):\n${log}`);
  // rename atomically so a concurrent loader never sees a half-written library
  Bun.spawnSync(["mv", "-f", tmp, out]);
  writeFileSync(stampFile, `${stamp.full}\n${stamp.sources}\n`);
  if (target === "cuda" && !opts.variant) writeFileSync(join(BUILD_DIR, "resource-usage.txt"), log);
  return { target, path: out, rebuilt: true, log };
}
