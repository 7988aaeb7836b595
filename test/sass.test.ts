// The SASS checks (src/verify/sass-checks.ts): the reader on hand-written listings (always), then the built
// CUDA library's machine code (where nvcc and cuobjdump are found), and a planted serialisation: a variant
// library built with -DPLANT_SERIAL_MATVEC, whose matvec uses each weight load before issuing the next
// (`#pragma unroll 1`), must fail the loads-in-flight check.
import { describe, expect, test } from "bun:test";

import { ensureBuilt, hasNvcc } from "../src/native/build.ts";
import { disassemble, findCuobjdump, loadBatches, loadFacts, loops, parseRegisterCounts, parseSass, type SassFunction } from "../src/native/sass.ts";
import { PRESETS } from "../src/model/config.ts";
import { planShape } from "../src/plan.ts";
import { activeLoads, factsFor } from "../src/verify/prediction.ts";
import { sassChecks, sassFacts, SASS_REQUIREMENTS } from "../src/verify/sass-checks.ts";

const listing = (name: string, lines: string[]) =>
  [`\t\tFunction : ${name}`, '\t.headerflags\t@"EF_CUDA_SM90"', ...lines.map((l, i) => `        /*${(i * 16).toString(16).padStart(4, "0")}*/  ${l} ;  /* 0x0 */`)].join("\n");

// 4 independent 16-byte loads, then their use: 4 in flight
const batched = listing("_Z7batchedPfPKf", [
  "LDC R1, c[0x0][0x28]",
  "@P0 LDG.E.128.CONSTANT R4, desc[UR6][R20.64]",
  "LDG.E.128 R8, desc[UR6][R22.64]",
  "LDG.E.128.STRONG.GPU R12, desc[UR6][R24.64+0x10]",
  "ACQBULK",
  "LDG.E.128 R16, desc[UR6][R26.64]",
  "FFMA R0, R5, R9, RZ",
  "STG.E.128 desc[UR6][R2.64], R12",
  "EXIT",
]);
// a loop that uses each load before the next; an out-of-line block after EXIT branching back is not a loop
const serial = listing("_Z6serialPfPKf", [
  "MOV R15, RZ",
  "LDG.E.128 R8, desc[UR6][R20.64]",
  "FFMA R15, R22, R8, R15",
  "IADD3 R20, P1, R20, R4, RZ",
  "@P1 BRA 0x10",
  "STL [R1], R15",
  "EXIT",
  "BRA.DIV UR4, 0x80",
  "SHFL.BFLY PT, R5, R4, 0x10, 0x1f",
  "BRA 0x50",
]);

describe("SASS reader", () => {
  test("parses functions, guards, opcodes and operands; a function listed by two ELF images once", () => {
    const fns = parseSass(`${batched}\n${serial}\n${batched}`);
    expect(fns.map((f) => f.kernel)).toEqual(["batched", "serial"]);
    expect(fns[0]!.instructions[1]).toEqual({ address: 0x10, guard: "@P0", opcode: "LDG.E.128.CONSTANT", operands: ["R4", "desc[UR6][R20.64]"] });
  });

  test("counts the loads issued before the first instruction reading one of them", () => {
    const [f] = parseSass(batched);
    expect(loadBatches(f!.instructions).map((b) => [b.wideLoads, b.loads, b.firstUse])).toEqual([[4, 4, 0x60]]);
    expect(loadFacts(f!)).toEqual({ wideLoadsInFlight: 4, localAccesses: 0 });
    expect(sassFacts(f!)).toMatchObject({ wideLoadsBeforeWait: 3, waits: true, nonCoherentLoads: 1 });
  });

  test("a loop's figure is its smallest batch; a branch back from past the last EXIT is no loop; LDL/STL counted", () => {
    const [f] = parseSass(serial);
    expect(loops(f!).map((l) => [l.start, l.end])).toEqual([[1, 4]]);
    expect(loadFacts(f!)).toEqual({ wideLoadsInFlight: 1, localAccesses: 1 });
  });

  test("registers per kernel from the ELF listing", () => {
    const elf = "\tValue:\tfunction: _Z7batchedPfPKf(0x13)\tregister count: 62\n\tValue:\tfunction: _Z6serialPfPKf(0x12)\tframe size: 0x0";
    expect([...parseRegisterCounts(elf)]).toEqual([["_Z7batchedPfPKf", 62]]);
  });

  test("a requirement fails below its loads or above its registers, and on local memory", () => {
    const fns = parseSass(`${batched}\n${serial}`);
    fns[0]!.registers = 40;
    fns[1]!.registers = 40;
    const rows = sassChecks(fns, [
      { kernel: "batched", minWideLoads: 4, maxRegisters: 64, why: "" },
      { kernel: "serial", minWideLoads: 4, maxRegisters: 64, why: "" },
      { kernel: "batched", minWideLoads: 4, maxRegisters: 32, why: "" },
    ]);
    expect(rows.map((r) => r.status)).toEqual(["pass", "fail", "fail", "fail", "fail"]); // + local memory, + programmatic launch
  });
});

const cuobjdump = findCuobjdump();
const skipReason = !hasNvcc() ? "nvcc not found (set NVCC or CUDA_HOME)" : !cuobjdump ? "no cuobjdump in $CUDA_HOME/bin or ../shared/cuda-binutils" : null;
if (skipReason) console.log(`sass.test.ts: skipping the built library's SASS checks: ${skipReason}`);

describe.skipIf(skipReason !== null)("the built CUDA library's SASS", () => {
  let disassembled: SassFunction[] | undefined;
  /** the library's kernels, disassembled once */
  const library = () => (disassembled ??= disassemble(ensureBuilt("cuda", { quiet: true }).path, cuobjdump!));

  test("every hot kernel keeps its loads in flight within its register budget; no local memory; every step kernel waits and loads coherently", () => {
    const fns = library();
    const rows = sassChecks(fns);
    for (const r of rows) console.log(`${r.status}  ${r.check}: ${r.detail}`);
    expect(rows.filter((r) => r.status !== "pass")).toEqual([]);
    expect(rows).toHaveLength(SASS_REQUIREMENTS.length + 2);
  }, 600_000);

  test("the matvecs issue their 8 weight loads before waiting for the predecessor (programmatic launch prefetches them)", () => {
    const fns = library();
    for (const name of ["linear_matvec_kernel<4>", "ln_qkv_kernel<4>", "ln_linear_gelu_kernel<4>", "linear_residual_kernel<4>"])
      expect(sassFacts(fns.find((f) => f.kernel === name)!).wideLoadsBeforeWait).toBe(8);
  }, 600_000);

  test("the kernel model's loads per thread for GPT-2 small's hot kernels never exceed what their SASS holds in flight", () => {
    const facts = library().map(sassFacts);
    const hot = new Set(SASS_REQUIREMENTS.map((r) => r.kernel));
    for (const plan of ["fused", "unfused"] as const)
      for (const op of planShape(PRESETS.gpt2!, 1, plan)) {
        const f = factsFor(op.family, facts)!;
        if (hot.has(f.kernel)) expect(activeLoads(op)).toBeLessThanOrEqual(f.wideLoadsInFlight!);
      }
  }, 600_000);

  test("planted serialisation (-DPLANT_SERIAL_MATVEC, #pragma unroll 1 in the matvec) fails the check", () => {
    const path = ensureBuilt("cuda", { quiet: true, extraFlags: ["-DPLANT_SERIAL_MATVEC"], variant: "planted_serial" }).path;
    const rows = sassChecks(disassemble(path, cuobjdump!));
    const failed = rows.filter((r) => r.status === "fail").map((r) => r.check);
    expect(failed).toEqual(["sass linear_matvec_kernel<4>", "sass ln_qkv_kernel<4>", "sass ln_linear_gelu_kernel<4>", "sass linear_residual_kernel<4>"]);
    expect(rows.find((r) => r.check === "sass linear_matvec_kernel<4>")!.detail).toMatch(/^1 x 16-byte loads/);
  }, 600_000);
});
