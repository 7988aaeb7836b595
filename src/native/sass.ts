// Reading the machine code (SASS) of the built CUDA library: which disassembler, its listing parsed into
// instructions (with the source lines behind them, from nvdisasm, where a kernel inlines several bodies), and the
// facts the checks and the kernel model need — how many global loads a thread has in flight before it uses the
// first of them, local-memory accesses, and registers per thread.
//
// "Loads in flight" is counted on the instruction stream: a batch starts at a global load and ends at the
// first instruction that reads a register one of the batch's loads wrote (the hardware's scoreboard makes
// that instruction wait for the load). Predicated loads count as issued. A loop is the code between a
// backward branch and its target; the code outside every loop is read as one straight line.
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CUDA_HOME, ROOT } from "./build.ts";
import { kernelName } from "./resource-usage.ts";

/** A CUDA binary utility from $CUDA_HOME/bin, else the copy beside the project (../shared/cuda-binutils), else null. */
function findBinutil(name: "cuobjdump" | "nvdisasm"): string | null {
  const candidates = [join(CUDA_HOME, "bin", name), join(ROOT, "../shared/cuda-binutils", name)];
  return candidates.find((p) => existsSync(p)) ?? null;
}
export const findCuobjdump = () => findBinutil("cuobjdump");
export const findNvdisasm = () => findBinutil("nvdisasm");

function run(exe: string, args: string[], cwd?: string): string {
  const p = Bun.spawnSync([exe, ...args], { stdout: "pipe", stderr: "pipe", cwd });
  if (!p.success)
    throw new Error(`${exe} ${args.join(" ")} failed (exit ${p.exitCode}): ${p.stderr.toString().split("\n")[0]}`);
  return p.stdout.toString();
}

export interface SassInstruction {
  address: number;
  /** guard predicate, e.g. "@P0" or "@!P3", or null */
  guard: string | null;
  opcode: string;
  operands: string[];
  /** the source lines it comes from, the kernel's own first, then each inlined call's (attachSourceLines) */
  source?: SourceLine[];
}

export interface SourceLine {
  file: string;
  line: number;
}

export interface SassFunction {
  mangled: string;
  /** readable name, e.g. `linear_matvec_kernel<4>` */
  kernel: string;
  instructions: SassInstruction[];
  /** registers per thread (EIATTR_REGCOUNT), when the ELF listing was read */
  registers?: number;
  /** why its instructions carry no source lines, where attachSourceLines was asked for them and failed */
  noSourceLines?: string;
}

const FUNCTION = /^\s*Function : (\S+)/;
const INSTRUCTION = /^\s*\/\*([0-9a-f]{4,})\*\/\s+(@!?U?P[T0-9]+\s+)?([A-Z0-9_.]+)\s*([^;]*);/;
const REGCOUNT = /function: (\S+)\(0x[0-9a-f]+\)\s+register count: (\d+)/;

/** Splits an operand list at the commas outside brackets. */
function splitOperands(text: string): string[] {
  const out: string[] = [];
  let depth = 0,
    start = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === "[") depth++;
    else if (ch === "]") depth--;
    else if (ch === "," && depth === 0) {
      out.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  const last = text.slice(start).trim();
  if (last) out.push(last);
  return out;
}

/** `cuobjdump -sass` output → functions (a function listed in several ELF images appears once). */
export function parseSass(listing: string): SassFunction[] {
  const functions = new Map<string, SassFunction>();
  let current: SassFunction | undefined;
  for (const line of listing.split("\n")) {
    const f = FUNCTION.exec(line);
    if (f) {
      current = functions.has(f[1]!) ? undefined : { mangled: f[1]!, kernel: kernelName(f[1]!), instructions: [] };
      if (current) functions.set(current.mangled, current);
      continue;
    }
    const m = current && INSTRUCTION.exec(line);
    if (!m) continue;
    current!.instructions.push({
      address: parseInt(m[1]!, 16),
      guard: m[2]?.trim() ?? null,
      opcode: m[3]!,
      operands: splitOperands(m[4]!),
    });
  }
  return [...functions.values()];
}

/** `cuobjdump -elf` output → registers per thread by mangled name. */
export function parseRegisterCounts(elfListing: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of elfListing.split("\n")) {
    const m = REGCOUNT.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

/** The names of the cubins and the PTX files a library embeds (`cuobjdump -lelf -lptx`). Throws if cuobjdump fails. */
export function embeddedCode(libraryPath: string, cuobjdump: string): { elf: string[]; ptx: string[] } {
  const listing = run(cuobjdump, ["-lelf", "-lptx", libraryPath]);
  const names = (kind: "ELF" | "PTX") =>
    [...listing.matchAll(new RegExp(`^${kind} file +\\d+: (.+)$`, "gm"))].map((m) => m[1]!);
  return { elf: names("ELF"), ptx: names("PTX") };
}

/** Every kernel of a library, with registers. Throws if the disassembler fails. */
export function disassemble(libraryPath: string, cuobjdump: string): SassFunction[] {
  const functions = parseSass(run(cuobjdump, ["-sass", libraryPath]));
  const registers = parseRegisterCounts(run(cuobjdump, ["-elf", libraryPath]));
  for (const f of functions) f.registers = registers.get(f.mangled);
  return functions;
}

// ---- the source lines behind the instructions ------------------------------------------------------------------
const SECTION = /^\s*\.section\s+\.text\.([^,\s]+),/;
const LINE_INFO = /^\s*\/\/## File "([^"]+)", line (\d+)/;
const ADDRESS = /^\s*\/\*([0-9a-f]{4,})\*\//;

/**
 * `nvdisasm -gi` output (the library is built with -lineinfo) → for each function (mangled), each instruction
 * address's source lines, outermost first: the kernel's own line, then the line of each inlined call inside it.
 * nvdisasm prints them innermost first, before the first instruction of a run of instructions from those lines.
 */
export function parseSourceLines(listing: string): Map<string, Map<number, SourceLine[]>> {
  const out = new Map<string, Map<number, SourceLine[]>>();
  let current: Map<number, SourceLine[]> | undefined;
  let pending: SourceLine[] = [];
  let lines: SourceLine[] = [];
  for (const text of listing.split("\n")) {
    if (/^\s*\.section\b/.test(text)) {
      const section = SECTION.exec(text); // a function's code; no other section's addresses are instructions
      current = section ? new Map() : undefined;
      if (section) out.set(section[1]!, current!);
      pending = [];
      lines = [];
      continue;
    }
    const info = LINE_INFO.exec(text);
    if (info) {
      pending.push({ file: info[1]!, line: Number(info[2]) });
      continue;
    }
    const address = current && ADDRESS.exec(text);
    if (!address) continue;
    if (pending.length > 0) {
      lines = pending.reverse();
      pending = [];
    }
    current!.set(parseInt(address[1]!, 16), lines);
  }
  return out;
}

/**
 * Gives the instructions of the functions compiled from `cuda/<unit>.cu` their source lines: that unit's ELF
 * image is extracted from the library (cuobjdump -xelf) and disassembled with line information (nvdisasm -gi).
 */
export function attachSourceLines(
  functions: SassFunction[],
  libraryPath: string,
  unit: string,
  tools: { cuobjdump: string; nvdisasm: string },
): void {
  const dir = mkdtempSync(join(tmpdir(), "decode-floor-sass-"));
  try {
    run(tools.cuobjdump, ["-xelf", unit, libraryPath], dir);
    const image = readdirSync(dir).find((f) => f.startsWith(`${unit}.`) && f.endsWith(".cubin"));
    if (!image) throw new Error(`no ELF image of ${unit}.cu in ${libraryPath}`);
    const sources = parseSourceLines(run(tools.nvdisasm, ["-gi", join(dir, image)]));
    for (const f of functions) {
      const lines = sources.get(f.mangled);
      if (lines) for (const inst of f.instructions) inst.source = lines.get(inst.address);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- registers read and written -------------------------------------------------------------------------------
const STORES =
  /^(ST|STG|STS|STL|RED|ATOM|ATOMG|ATOMS|BAR|BRA|EXIT|RET|CALL|BSSY|BSYNC|WARPSYNC|NOP|MEMBAR|FENCE|CCTL|ERRBAR)(\.|$)/;

/** Registers per access of a sized opcode: .128 → 4, .64 → 2, else 1. */
function accessWidth(opcode: string): number {
  if (/\.128(\.|$)/.test(opcode)) return 4;
  if (/\.64(\.|$)/.test(opcode) || /^CS2R(\.|$)/.test(opcode) || /\.WIDE(\.|$)/.test(opcode)) return 2;
  return 1;
}

/** The general registers an operand names: `R8` → [8], `[R20.64+0x10]` → [20, 21], `-R3.reuse` → [3]; RZ and UR* → []. */
function registersOf(operand: string, width = 1): number[] {
  const out: number[] = [];
  for (const m of operand.matchAll(/(?<![A-Z])R(\d+)(\.64)?/g)) {
    const base = Number(m[1]);
    const n = m[2] ? 2 : width;
    for (let i = 0; i < n; i++) out.push(base + i);
  }
  return out;
}

export function isGlobalLoad(i: SassInstruction): boolean {
  return /^(LDG|LD)(\.|$)/.test(i.opcode);
}
export function isWideLoad(i: SassInstruction): boolean {
  return isGlobalLoad(i) && accessWidth(i.opcode) === 4;
}
export function isLocalAccess(i: SassInstruction): boolean {
  return /^(LDL|STL)(\.|$)/.test(i.opcode);
}

/** Index of the operand an instruction writes (-1: none): the first, except SHFL/VOTE's predicate-first forms. */
function destinationIndex(i: SassInstruction): number {
  if (STORES.test(i.opcode) || i.operands.length === 0) return -1;
  if (/^(SHFL|VOTE)(\.|$)/.test(i.opcode) && /^P[T0-9]/.test(i.operands[0]!)) return 1;
  return /^R\d/.test(i.operands[0]!) ? 0 : -1;
}

export function writes(i: SassInstruction): number[] {
  const d = destinationIndex(i);
  if (d < 0) return [];
  const width =
    isGlobalLoad(i) || /^(LDS|LDC|LDL|LD)(\.|$)/.test(i.opcode) || /^CS2R/.test(i.opcode) || /\.WIDE/.test(i.opcode)
      ? accessWidth(i.opcode)
      : 1;
  return registersOf(i.operands[d]!, width);
}

export function reads(i: SassInstruction): number[] {
  const d = destinationIndex(i);
  const out: number[] = [];
  i.operands.forEach((op, k) => {
    if (k === d) return;
    // a store's data operand is as wide as the access; IMAD.WIDE's addend is a register pair
    const isData = STORES.test(i.opcode) && !op.startsWith("[") && !/desc\[/.test(op);
    const width = isData ? accessWidth(i.opcode) : /\.WIDE/.test(i.opcode) && k === i.operands.length - 1 ? 2 : 1;
    out.push(...registersOf(op, width));
  });
  return out;
}

// ---- loads in flight ------------------------------------------------------------------------------------------
export interface LoadBatch {
  /** address of the batch's first load */
  start: number;
  /** global loads issued before the first use of any of them */
  loads: number;
  /** of which 16-byte loads */
  wideLoads: number;
  /** address of the instruction that first reads one of them (null: none before the range ended) */
  firstUse: number | null;
}

/** Batches of global loads over instructions in program order. */
export function loadBatches(instructions: SassInstruction[]): LoadBatch[] {
  const batches: LoadBatch[] = [];
  let pending = new Set<number>();
  let batch: LoadBatch | null = null;
  for (const inst of instructions) {
    if (batch && reads(inst).some((r) => pending.has(r))) {
      batch.firstUse = inst.address;
      batches.push(batch);
      batch = null;
      pending = new Set();
    }
    if (isGlobalLoad(inst)) {
      batch ??= { start: inst.address, loads: 0, wideLoads: 0, firstUse: null };
      batch.loads++;
      if (isWideLoad(inst)) batch.wideLoads++;
      for (const r of writes(inst)) pending.add(r);
    } else if (!inst.guard) {
      for (const r of writes(inst)) pending.delete(r); // overwritten before any use: no longer waited on
    }
  }
  if (batch) batches.push(batch);
  return batches;
}

export interface Loop {
  /** instruction indices [start, end]: the branch target through the backward branch */
  start: number;
  end: number;
}

/**
 * Regions closed by a backward branch (BRA to a lower address). A region holding an unconditional EXIT is not
 * a loop: ptxas places the divergent path of a warp collective out of line, after the kernel's last EXIT, and
 * branches back to where it rejoins.
 */
export function loops(f: SassFunction): Loop[] {
  const index = new Map(f.instructions.map((inst, k) => [inst.address, k]));
  const out: Loop[] = [];
  f.instructions.forEach((inst, k) => {
    if (!/^BRA(\.|$)/.test(inst.opcode)) return;
    const target = parseInt(inst.operands[inst.operands.length - 1]!, 16);
    const start = index.get(target);
    if (start === undefined || target >= inst.address) return;
    const exits = f.instructions.slice(start, k).some((i) => /^EXIT(\.|$)/.test(i.opcode) && !i.guard);
    if (!exits) out.push({ start, end: k });
  });
  return out;
}

export interface LoadFacts {
  /** 16-byte global loads a thread has in flight: the smallest batch inside every loop that issues such loads
   *  and the largest batch of the code outside loops, whichever is smaller (null: no 16-byte loads) */
  wideLoadsInFlight: number | null;
  localAccesses: number;
}

/**
 * Loads in flight of a function's code, or of the part of it `within` selects (by instruction index: an inlined
 * body, say); a loop counts when its backward branch is within that part (its first instructions may carry the
 * caller's line), and is read over the instructions of the part inside it.
 */
export function loadFacts(f: SassFunction, within: (k: number) => boolean = () => true): LoadFacts {
  const selected = f.instructions.filter((_, k) => within(k));
  const localAccesses = selected.filter(isLocalAccess).length;
  const regions = loops(f).filter((l) => within(l.end));
  const figures: number[] = [];
  for (const l of regions) {
    const inside = f.instructions.slice(l.start, l.end + 1).filter((_, k) => within(l.start + k));
    const wide = loadBatches(inside).filter((b) => b.wideLoads > 0);
    if (wide.length > 0) figures.push(Math.min(...wide.map((b) => b.wideLoads)));
  }
  const inLoop = (k: number) => regions.some((l) => k >= l.start && k <= l.end);
  const outside = f.instructions.filter((_, k) => within(k) && !inLoop(k));
  const straight = loadBatches(outside).filter((b) => b.wideLoads > 0);
  if (straight.length > 0) figures.push(Math.max(...straight.map((b) => b.wideLoads)));
  return { wideLoadsInFlight: figures.length > 0 ? Math.min(...figures) : null, localAccesses };
}

// ---- the arithmetic's share of what is issued -------------------------------------------------------------------
const isFma = (i: SassInstruction) => /^FFMA(\.|$)/.test(i.opcode);

/**
 * FFMA instructions as a share of all instructions in the region that holds the most of them (a loop, or the code
 * outside every loop): an SM issues one instruction per lane and cycle, so a kernel whose multiply-adds are this
 * share of its instructions reaches at most this share of the fp32 peak. Null where the kernel has no FFMA.
 */
export function fmaShare(f: SassFunction): number | null {
  const regions = loops(f);
  const inLoop = (k: number) => regions.some((l) => k >= l.start && k <= l.end);
  const candidates = [
    ...regions.map((l) => f.instructions.slice(l.start, l.end + 1)),
    f.instructions.filter((_, k) => !inLoop(k)),
  ];
  const best = candidates.map((r) => ({ fma: r.filter(isFma).length, all: r.length })).sort((a, b) => b.fma - a.fma)[0];
  return best && best.fma > 0 ? best.fma / best.all : null;
}
