// Parses nvcc --resource-usage (ptxas) output into one row per kernel: registers, shared memory, stack and
// spills. The CUDA build writes its log to build/resource-usage.txt (src/native/build.ts).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { kernelFamily, OP_FAMILIES, type OpFamily } from "../ops.ts";
import { BUILD_DIR } from "./build.ts";

export interface KernelResources {
  /** demangled enough to read: `linear_matvec_kernel<4>` */
  kernel: string;
  mangled: string;
  arch: string;
  registers: number;
  barriers: number;
  smemBytes: number;
  stackBytes: number;
  spillStores: number;
  spillLoads: number;
}

export const RESOURCE_USAGE_PATH = join(BUILD_DIR, "resource-usage.txt");

/** Builtin types as template arguments (Itanium ABI codes). */
const BUILTIN_TYPES: Record<string, string> = { f: "float", d: "double", i: "int", j: "unsigned int", b: "bool" };

/**
 * `_Z16attention_kernelPf…` → `attention_kernel`; `_Z20linear_matvec_kernelILi4EEv…` → `linear_matvec_kernel<4>`;
 * `_Z20linear_matvec_kernelI13__nv_bfloat16Li8ELi4EEv…` → `linear_matvec_kernel<__nv_bfloat16, 8, 4>`;
 * `_Z11pair_kernelI6__halfS0_Li1EEv…` → `pair_kernel<__half, __half, 1>` (template arguments that
 * are integers, builtin types, named types or a repeat of a named type).
 */
export function kernelName(mangled: string): string {
  const m = /^_Z(\d+)/.exec(mangled);
  if (!m) return mangled;
  const start = m[0].length;
  const name = mangled.slice(start, start + Number(m[1]));
  let rest = mangled.slice(start + Number(m[1]));
  if (!rest.startsWith("I")) return name;
  rest = rest.slice(1);
  const args: string[] = [];
  const substitutions: string[] = [name]; // what S_, S0_, S1_, … repeat: the template's name, then its named types
  while (!rest.startsWith("E")) {
    const literal = /^L[ijb](\d+)E/.exec(rest);
    const named = /^(\d+)/.exec(rest);
    const repeated = /^S([0-9A-Z]*)_/.exec(rest);
    if (literal) {
      args.push(literal[1]!);
      rest = rest.slice(literal[0].length);
    } else if (named) {
      const type = rest.slice(named[0].length, named[0].length + Number(named[1]));
      args.push(type);
      substitutions.push(type);
      rest = rest.slice(named[0].length + Number(named[1]));
    } else if (repeated && substitutions[repeated[1] === "" ? 0 : parseInt(repeated[1]!, 36) + 1] !== undefined) {
      args.push(substitutions[repeated[1] === "" ? 0 : parseInt(repeated[1]!, 36) + 1]!);
      rest = rest.slice(repeated[0].length);
    } else if (BUILTIN_TYPES[rest[0]!]) {
      args.push(BUILTIN_TYPES[rest[0]!]!);
      rest = rest.slice(1);
    } else {
      return name; // a template argument this reader does not know
    }
  }
  return `${name}<${args.join(", ")}>`;
}

const ENTRY = /Compiling entry function '([^']+)' for '([^']+)'/;
const FRAME = /(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/;
const USED = /Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?/;

export function parseResourceUsage(log: string): KernelResources[] {
  const rows: KernelResources[] = [];
  let current: KernelResources | undefined;
  for (const line of log.split("\n")) {
    const entry = ENTRY.exec(line);
    if (entry) {
      current = {
        kernel: kernelName(entry[1]!),
        mangled: entry[1]!,
        arch: entry[2]!,
        registers: 0,
        barriers: 0,
        smemBytes: 0,
        stackBytes: 0,
        spillStores: 0,
        spillLoads: 0,
      };
      rows.push(current);
      continue;
    }
    if (!current) continue;
    const frame = FRAME.exec(line);
    if (frame) {
      current.stackBytes = Number(frame[1]);
      current.spillStores = Number(frame[2]);
      current.spillLoads = Number(frame[3]);
      continue;
    }
    const used = USED.exec(line);
    if (used) {
      current.registers = Number(used[1]);
      current.barriers = Number(used[2] ?? 0);
      current.smemBytes = Number(used[3] ?? 0);
    }
  }
  return rows;
}

/** The last CUDA build's table, or undefined if no build log is there. */
export function readResourceUsage(path = RESOURCE_USAGE_PATH): KernelResources[] | undefined {
  return existsSync(path) ? parseResourceUsage(readFileSync(path, "utf8")) : undefined;
}

/** Op families with no kernel in `rows` (every CUDA build must have one per family: profiles map kernels to families). */
export function missingFamilies(rows: KernelResources[]): OpFamily[] {
  return OP_FAMILIES.filter((family) => !rows.some((r) => kernelFamily(r.kernel) === family));
}
