// Where the commands' results go, written so that nothing is lost or mixed: stdout written whole or one
// error line; files written beside their target under a temporary name and renamed into place only when
// complete (a failure leaves no partial file and no empty directory); a profile run's folder never replaces
// an earlier run unless asked to (--force), and then only once the new one is complete.
import {
  accessSync,
  chmodSync,
  closeSync,
  constants,
  existsSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmdirSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join, resolve } from "node:path";

import { UserError } from "../errors.ts";
import { ioReason } from "../model/files.ts";
import { OPTIONAL_FILES, OUTPUT_FILES } from "../report/output-files.ts";

const EAGAIN_WAIT_MS = 1;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of `data` to a file descriptor, waiting out EAGAIN (a non-blocking pipe that is full). */
function writeAll(fd: number, data: Uint8Array): void {
  let done = 0;
  while (done < data.length) {
    try {
      done += writeSync(fd, data, done, data.length - done);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
      Atomics.wait(sleeper, 0, 0, EAGAIN_WAIT_MS);
    }
  }
}

/** The command's result on stdout, written synchronously; a failure (a full disk, a closed pipe) is one error line. */
export function writeStdout(text: string): void {
  try {
    writeAll(1, new TextEncoder().encode(text));
  } catch (e) {
    throw new UserError(`cannot write to stdout: ${ioReason(e)}`);
  }
}

/** Fails with one line if `dir` is not a directory this process may create files in. */
function checkWritableDir(flag: string, path: string, dir: string): void {
  if (!existsSync(dir)) throw new UserError(`--${flag} ${path}: the directory ${dir} does not exist`);
  if (!statSync(dir).isDirectory()) throw new UserError(`--${flag} ${path}: ${dir} is not a directory`);
  try {
    accessSync(dir, constants.W_OK);
  } catch (e) {
    throw new UserError(`--${flag} ${path} cannot be written: ${ioReason(e)}`);
  }
}

/**
 * An output file's place is checked before any work, so a bad path loses nothing; nothing is created yet
 * (the file appears, whole, when it is written). A file that exists is replaced only where `replace` says so; a
 * device or a FIFO (/dev/stdout) is written in place.
 */
export function checkWritableFile(flag: string, path: string, opts: { replace: boolean }): string {
  const full = resolve(path);
  if (!existsSync(full)) {
    checkWritableDir(flag, path, dirname(full));
    return full;
  }
  const stat = statSync(full);
  if (stat.isDirectory()) throw new UserError(`--${flag} ${path} is a directory, not a file`);
  if (stat.isFile() && !opts.replace)
    throw new UserError(`--${flag} ${path} exists: give --force to replace it, or another file`);
  try {
    accessSync(full, constants.W_OK);
  } catch (e) {
    throw new UserError(`--${flag} ${path} cannot be written: ${ioReason(e)}`);
  }
  if (stat.isFile()) checkWritableDir(flag, path, dirname(full)); // the temporary file goes beside it
  return full;
}

/** Fails with one line where two of the flags name one file (one would overwrite what the other reads or writes). */
export function checkDistinctFiles(flags: readonly (readonly [string, string | undefined])[]): void {
  const given = flags.filter((f): f is readonly [string, string] => f[1] !== undefined);
  const real = given.map(([, path]) => (existsSync(path) ? realpathSync(path) : resolve(path)));
  for (let i = 0; i < given.length; i++)
    for (let j = i + 1; j < given.length; j++)
      if (real[i] === real[j] && !isDevice(real[i]!))
        throw new UserError(`--${given[j]![0]} ${given[j]![1]} is the file --${given[i]![0]} names: give another`);
}

/** A path that is not a regular file or a directory (a device or a FIFO, such as /dev/stdout). */
const isDevice = (path: string) => existsSync(path) && !statSync(path).isFile() && !statSync(path).isDirectory();

/** Flushes a file (or a directory's entries) to the disk. */
function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Opens `path` with `flags`, writes all of `data`, flushes it to the disk if asked, closes it. */
function writeThrough(path: string, flags: string, data: Uint8Array, flush: boolean): void {
  const fd = openSync(path, flags);
  try {
    writeAll(fd, data);
    if (flush) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `data` to `path` whole or not at all: into a temporary file beside it, flushed, then renamed over
 * it. A path that exists and is not a regular file (a device, a FIFO) is written in place. Errors are one line.
 */
export function writeFileAtomic(path: string, data: Uint8Array): void {
  if (existsSync(path) && !statSync(path).isFile()) {
    try {
      writeThrough(path, "w", data, false);
    } catch (e) {
      throw new UserError(`cannot write ${path}: ${ioReason(e)}`);
    }
    return;
  }
  const temp = join(dirname(path), `.${basename(path)}.partial-${process.pid}`);
  try {
    writeThrough(temp, "wx", data, true);
    renameSync(temp, path);
  } catch (e) {
    rmSync(temp, { force: true });
    throw new UserError(`cannot write ${path} (through ${basename(temp)} beside it): ${ioReason(e)}`);
  }
}

/** What a command writes into its --out folder: what to call it, the file every earlier output holds, and all its files. */
export interface OutputKind {
  noun: string;
  primary: string;
  files: readonly string[];
}

export const PROFILE_RUN: OutputKind = {
  noun: "a profile run",
  primary: OUTPUT_FILES.summary,
  // the trace as the committed runs of profiles/ keep it, gzipped
  files: [...Object.values(OUTPUT_FILES), ...Object.values(OPTIONAL_FILES), `${OUTPUT_FILES.trace}.gz`],
};

/** Whether anything is at `path`, a symbolic link included (existsSync follows one, and a dangling one is absent). */
function lexists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Names listed in an error line, at most this many. */
const NAMES_SHOWN = 3;

/**
 * Fails with one line unless the explicit --out `target` is missing, empty, or holds an earlier output of `kind` (its
 * primary file, and nothing but regular files of its names), and that only with `force`: a folder that holds anything
 * else (the user's notes beside a run, a folder under an output's name) is never replaced, since replacing it
 * removes the folder whole.
 */
export function checkOutFolder(target: string, kind: OutputKind, force: boolean): void {
  const dir = resolve(target);
  const shown = `--out ${target}`;
  if (lexists(dir) && lstatSync(dir).isSymbolicLink())
    throw new UserError(`${shown} is a symbolic link: give the folder it points to, or another --out`);
  if (!existsSync(dir)) return;
  if (!statSync(dir).isDirectory()) throw new UserError(`${shown} is a file, not a directory`);
  const names = readdirSync(dir);
  if (!names.length) return;
  const foreign = names.filter((n) => !kind.files.includes(n) || !lstatSync(join(dir, n)).isFile()).sort();
  if (!names.includes(kind.primary) || foreign.includes(kind.primary))
    throw new UserError(
      `${shown} is a directory holding other files (${names.length}), not ${kind.noun}: give a new or empty directory`,
    );
  if (foreign.length) {
    const listed = foreign.slice(0, NAMES_SHOWN).join(", ") + (foreign.length > NAMES_SHOWN ? ", …" : "");
    throw new UserError(
      `${shown} holds ${kind.noun} and files it did not write (${foreign.length}: ${listed}), which replacing it would remove: move them, or give another --out`,
    );
  }
  if (!force) throw new UserError(`${shown} already holds ${kind.noun}: give --force to replace it, or another --out`);
}

/**
 * A profile run's output folder. `prepare` (before any measuring) checks the target and creates a
 * temporary folder beside it; the run is written there; `commit` renames it into place. The default
 * target (`fresh`) never replaces anything: it takes the first free name of DIR, DIR-2, DIR-3, … An explicit
 * one that already holds a run is replaced only with `force`, the old folder removed after the new one is in.
 * `discard` removes the temporary folder and any parent folders `prepare` created.
 */
export class ProfileOutput {
  private constructor(
    readonly target: string,
    readonly staging: string,
    private readonly fresh: boolean,
    private readonly createdParent: string | undefined,
  ) {}

  static prepare(target: string, opts: { fresh: boolean; force: boolean; kind?: OutputKind }): ProfileOutput {
    const dir = resolve(target);
    const shown = `--out ${target}`;
    if (!opts.fresh) checkOutFolder(target, opts.kind ?? PROFILE_RUN, opts.force);
    const parent = dirname(dir);
    if (existsSync(parent) && !statSync(parent).isDirectory())
      throw new UserError(`${shown}: ${parent} is not a directory`);
    let createdParent: string | undefined;
    try {
      createdParent = mkdirSync(parent, { recursive: true });
      const staging = mkdtempSync(join(parent, `.${basename(dir)}.partial-`));
      try {
        chmodSync(staging, 0o777 & ~process.umask()); // mkdtemp's 0700, made what mkdir would have given the folder
      } catch (e) {
        rmdirSync(staging);
        throw e;
      }
      return new ProfileOutput(dir, staging, opts.fresh, createdParent);
    } catch (e) {
      if (createdParent) removeEmptyParents(parent, createdParent);
      throw new UserError(`${shown} cannot be written: ${ioReason(e)}`);
    }
  }

  /**
   * Writes the run with `write(stagingDir)` (one error line if it fails; nothing is left), flushes every
   * file, and renames the folder into place; returns where the results went.
   */
  commit(write: (dir: string) => void): string {
    try {
      write(this.staging);
      for (const name of readdirSync(this.staging)) fsyncPath(join(this.staging, name));
      fsyncPath(this.staging);
    } catch (e) {
      this.discard();
      if (e instanceof UserError) throw e;
      throw new UserError(`cannot write the results to ${this.target}: ${ioReason(e)}`);
    }
    try {
      return this.fresh ? this.renameFresh() : this.renameOver();
    } catch (e) {
      this.discard();
      throw new UserError(`cannot move the results into ${this.target}: ${ioReason(e)}`);
    }
  }

  /** DIR, or DIR-2, DIR-3, …: the first name nothing holds (renaming onto an existing non-empty folder fails, so a race loses nothing). */
  private renameFresh(): string {
    for (let n = 1; ; n++) {
      const candidate = n === 1 ? this.target : `${this.target}-${n}`;
      if (lexists(candidate)) continue; // a dangling symbolic link too
      try {
        renameSync(this.staging, candidate);
        return candidate;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== "EEXIST" && code !== "ENOTEMPTY") throw e;
      }
    }
  }

  /** The target replaced: a missing or empty one in one rename; a previous run moved aside, the new one in, then the old removed. */
  private renameOver(): string {
    if (!existsSync(this.target) || readdirSync(this.target).length === 0) {
      renameSync(this.staging, this.target);
      return this.target;
    }
    const old = join(dirname(this.target), `.${basename(this.target)}.replaced-${process.pid}`);
    renameSync(this.target, old);
    try {
      renameSync(this.staging, this.target);
    } catch (e) {
      renameSync(old, this.target);
      throw e;
    }
    rmSync(old, { recursive: true, force: true });
    return this.target;
  }

  discard(): void {
    rmSync(this.staging, { recursive: true, force: true });
    if (this.createdParent) removeEmptyParents(dirname(this.target), this.createdParent);
  }
}

/** Removes `dir` and its parents up to and including `top`, as long as each is empty. */
function removeEmptyParents(dir: string, top: string): void {
  for (let d = dir; d.startsWith(top); d = dirname(d)) {
    try {
      rmdirSync(d);
    } catch {
      return;
    }
    if (d === top) return;
  }
}
