/**
 * Model files read without surprises: only regular files are opened for reading (a FIFO would block
 * forever, /dev/zero never ends, a directory is not a file), and reads are positioned and exact, so a file
 * that is shorter than its header promises, or that shrinks while it is read, is an error, not garbage.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";

import { UserError } from "../errors.ts";

export interface RegularFile {
  readonly path: string;
  readonly fd: number;
  readonly size: number;
}

/** What an fstat says a path is, for an error about it. */
function kindOf(stat: ReturnType<typeof fstatSync>): string {
  if (stat.isDirectory()) return "a directory";
  if (stat.isFIFO()) return "a FIFO (named pipe)";
  if (stat.isCharacterDevice()) return "a character device";
  if (stat.isBlockDevice()) return "a block device";
  if (stat.isSocket()) return "a socket";
  return "not a regular file";
}

/** Why an open or a read failed, in words, with the errno code. */
export function ioReason(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  const words: Record<string, string> = {
    ENOENT: "file not found",
    EACCES: "permission denied",
    EPERM: "operation not permitted",
    EISDIR: "is a directory",
    ELOOP: "too many symbolic links",
    ENAMETOOLONG: "name too long",
    ENOTDIR: "a parent is not a directory",
    EIO: "input/output error",
    ENOSPC: "no space left on device",
    EROFS: "read-only file system",
    EDQUOT: "disk quota exceeded",
    EFBIG: "file too large",
    EMFILE: "too many open files",
    ENOTEMPTY: "directory not empty",
    EEXIST: "already exists",
    EPIPE: "broken pipe (the reader has gone)",
    ENXIO: "no such device or address",
  };
  return err.code
    ? `${words[err.code] ?? err.message.split("\n")[0]} (${err.code})`
    : String((e as Error).message ?? e).split("\n")[0]!;
}

/**
 * Opens `path` for reading if it is a regular file. O_NONBLOCK keeps the open itself from waiting for a
 * FIFO's writer; fstat on the descriptor then says what was opened (no race with a swapped path).
 */
export function openRegularFile(path: string): RegularFile {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    throw new UserError(`${path}: cannot open: ${ioReason(e)}`);
  }
  const stat = fstatSync(fd);
  if (!stat.isFile()) {
    closeSync(fd);
    throw new UserError(`${path} is ${kindOf(stat)}, not a regular file`);
  }
  return { path, fd, size: stat.size };
}

export function closeFile(file: RegularFile): void {
  closeSync(file.fd);
}

/** Fills `into` from byte `position` of the file; a file that ends first is an error. */
export function readExactly(file: RegularFile, into: Uint8Array, position: number): void {
  let done = 0;
  while (done < into.length) {
    let n: number;
    try {
      n = readSync(file.fd, into, done, into.length - done, position + done);
    } catch (e) {
      throw new UserError(`${file.path}: cannot read: ${ioReason(e)}`);
    }
    if (n === 0) {
      throw new UserError(
        `${file.path}: ends at byte ${position + done}, but ${into.length - done} more bytes were expected there (truncated while being read?)`,
      );
    }
    done += n;
  }
}

/** A small regular file's text (config.json), refused above `maxBytes`. */
export function readSmallTextFile(path: string, maxBytes: number): string {
  const file = openRegularFile(path);
  try {
    if (file.size > maxBytes)
      throw new UserError(`${path}: ${file.size} bytes is too large for this file (at most ${maxBytes})`);
    const bytes = new Uint8Array(file.size);
    readExactly(file, bytes, 0);
    return new TextDecoder().decode(bytes);
  } finally {
    closeFile(file);
  }
}

/** A config.json is a few hundred bytes; anything above this is not one. */
const MAX_CONFIG_BYTES = 1 << 20;

/** A small JSON file holding one object (config.json and its kin), each problem one line. */
export function parseJsonObject(path: string): Record<string, unknown> {
  const text = readSmallTextFile(path, MAX_CONFIG_BYTES); // says what went wrong: a directory, a FIFO, no permission
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new UserError(`${path}: not valid JSON (${(e as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UserError(`${path}: expected a JSON object`);
  }
  return value as Record<string, unknown>;
}
