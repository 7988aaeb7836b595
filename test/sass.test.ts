// The SASS checks (src/verify/sass-checks.ts): the reader on hand-written listings (always), then the built
// CUDA library's machine code (where nvcc and cuobjdump are found), and two planted faults: a variant library
// built with -DPLANT_SERIAL_MATVEC, whose matvec uses each weight load before issuing the next (`#pragma unroll
// 1`), must fail the loads-in-flight check; one built with -DPLANT_TASK_IN_GLOBAL, whose persistent step kernel
// reads its tasks' arguments from global memory, must fail the check of the persistent kernel's bodies.
import { describe, expect, test } from "bun:test";

import { ensureBuilt, hasNvcc } from "../src/native/build.ts";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import {
  findCuobjdump,
  findNvdisasm,
  fmaShare,
  loadBatches,
  loadFacts,
  loops,
  parseRegisterCounts,
  parseSass,
  parseSourceLines,
  type SassFunction,
} from "../src/native/sass.ts";
import { PRESETS } from "../src/model/gpt2.ts";
import type { ModelConfig } from "../src/model/architectures.ts";
import { LLAMA_PRESETS } from "../src/model/llama.ts";
import { planShapeOf } from "../src/plans.ts";
import { PLAN_KINDS } from "../src/plan.ts";
import { libraryKernelFacts, type KernelFacts } from "../src/native/kernel-facts.ts";
import { activeLoads, factsFor, kernelOf } from "../src/profile/kernel-model/index.ts";
import {
  bodyArchs,
  librarySassFunctions,
  runTaskCases,
  sassChecks,
  sassFacts,
  sassRequirements,
  taskFamily,
} from "../src/verify/sass-checks.ts";

/** The kernels' facts (the emulator's library: the same sources as the CUDA one). */
const facts = libraryKernelFacts(ensureBuilt("emu", { quiet: true }).path);

const listing = (name: string, lines: string[]) =>
  [
    `\t\tFunction : ${name}`,
    '\t.headerflags\t@"EF_CUDA_SM90"',
    ...lines.map((l, i) => `        /*${(i * 16).toString(16).padStart(4, "0")}*/  ${l} ;  /* 0x0 */`),
  ].join("\n");

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
    expect(fns[0]!.instructions[1]).toEqual({
      address: 0x10,
      guard: "@P0",
      opcode: "LDG.E.128.CONSTANT",
      operands: ["R4", "desc[UR6][R20.64]"],
    });
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

  test("FFMA's share of the instructions, in the region (a loop, or the code outside loops) that holds the most of them", () => {
    const mixed = listing("_Z5mixedv", [
      "FFMA R1, R2, R3, R1", // outside: 1 of 4 (the exit and the branch included)
      "FFMA R4, R2, R3, R4", // loop from here: 2 FFMA of 4
      "FFMA R5, R2, R3, R5",
      "IADD3 R6, R6, 0x1, RZ",
      "@P0 BRA 0x10",
      "EXIT",
    ]);
    expect(fmaShare(parseSass(mixed)[0]!)).toBe(0.5);
    expect(fmaShare(parseSass(listing("_Z4nonev", ["MOV R1, RZ", "EXIT"]))[0]!)).toBeNull();
    expect(sassFacts(parseSass(mixed)[0]!).fmaShare).toBe(0.5);
  });

  test("source lines from nvdisasm -gi: outermost first, carried to the following instructions, per function", () => {
    const gi = [
      '\t.section\t.text._Z1fv,"ax",@progbits',
      '\t//## File "/x/cuda/linear.h", line 137 inlined at "/x/cuda/persistent.cu", line 69',
      '\t//## File "/x/cuda/persistent.cu", line 69 inlined at "/x/cuda/persistent.cu", line 131',
      '\t//## File "/x/cuda/persistent.cu", line 131',
      "        /*0000*/                   LDG.E.128 R4, desc[UR6][R2.64] ;",
      "        /*0010*/                   FFMA R0, R4, R5, RZ ;",
      '\t//## File "/x/cuda/persistent.cu", line 140',
      "        /*0020*/                   EXIT ;",
      '\t.section\t.text._Z1gv,"ax",@progbits',
      "        /*0000*/                   EXIT ;",
    ].join("\n");
    const lines = parseSourceLines(gi);
    const frames = [
      { file: "/x/cuda/persistent.cu", line: 131 },
      { file: "/x/cuda/persistent.cu", line: 69 },
      { file: "/x/cuda/linear.h", line: 137 },
    ];
    expect([...lines.get("_Z1fv")!]).toEqual([
      [0, frames],
      [0x10, frames],
      [0x20, [{ file: "/x/cuda/persistent.cu", line: 140 }]],
    ]);
    expect([...lines.get("_Z1gv")!]).toEqual([[0, []]]);
    // another section's addresses are not instructions of the function before it
    expect([
      ...parseSourceLines(`${gi}\n\t.section\t.nv.info,"",@"SHT_CUDA_INFO"\n        /*0030*/ \t.byte\t0x04`)
        .get("_Z1gv")!
        .keys(),
    ]).toEqual([0]);
  });

  test("loads in flight of a part of a function: its loops and its straight code only", () => {
    const [f] = parseSass(serial);
    expect(loadFacts(f!, (k) => k >= 5)).toEqual({ wideLoadsInFlight: null, localAccesses: 1 }); // past the loop
    expect(loadFacts(f!, (k) => k !== 4).wideLoadsInFlight).toBe(1); // the loop's end left out: straight code
    // a loop whose head carries the caller's line is still the part's loop (its smallest batch: 1), not straight code (2)
    const headed = parseSass(
      listing("_Z6headedv", [
        "MOV R15, RZ",
        "IADD3 R20, P1, R20, R4, RZ",
        "LDG.E.128 R8, desc[UR6][R20.64]",
        "FFMA R15, R22, R8, R15",
        "LDG.E.128 R4, desc[UR6][R24.64]",
        "@P1 BRA 0x10",
        "LDG.E.128 R12, desc[UR6][R26.64]",
        "STG.E.128 desc[UR6][R2.64], R12",
        "EXIT",
      ]),
    )[0]!;
    expect(loadFacts(headed, (k) => k !== 1).wideLoadsInFlight).toBe(1);
    expect(loadFacts(headed, (k) => k !== 5).wideLoadsInFlight).toBe(2); // its backward branch left out: straight code
    expect(loadFacts(parseSass(batched)[0]!, (k) => k > 2).wideLoadsInFlight).toBe(2);
  });

  test("the StepBody rows in cuda/persistent.cu: each row's run, and none of its look-ahead", () => {
    const source = readFileSync(join(import.meta.dir, "../cuda/persistent.cu"), "utf8");
    const cases = runTaskCases(source);
    const lines = source.split("\n");
    const runOf = (kind: string) =>
      [...cases]
        .filter(([, k]) => k === kind)
        .map(([n]) => lines[n - 1]!.trim())
        .join(" ");
    expect(runOf("kTaskLnQkv")).toMatch(/void run\(.*matvec<W, kV<W>, kRows, kOpLnQkv>\(.*}$/);
    expect(runOf("kTaskAttention")).toMatch(/void run\(.*attention<W, kV<W>>\(.*}$/);
    expect(runOf("kTaskLnLmHeadArgmax")).toMatch(/lm_head<W, kV<W>, kRows, kLnLmHeadArgmax>/);
    expect(runOf("kTaskRmsGateUp")).toMatch(/matvec<W, kV<W>, kRows, kOpRmsGateUp>/);
    const kinds = [
      "kTaskEmbed",
      "kTaskLnQkv",
      "kTaskAttention",
      "kTaskLnLinearGelu",
      "kTaskLinearResidual",
      "kTaskLnLmHeadArgmax",
      "kTaskRmsQkvRope",
      "kTaskRmsGateUp",
      "kTaskRmsLmHeadArgmax",
    ];
    expect(new Set(cases.values())).toEqual(new Set(kinds));
    // each body runs in one architecture's step, or in every one's
    const archs = bodyArchs(readFileSync(join(import.meta.dir, "../cuda/step_tasks.h"), "utf8"));
    expect(Object.fromEntries(archs)).toEqual({
      kTaskEmbed: null,
      kTaskLnQkv: "Gpt2Step",
      kTaskAttention: null,
      kTaskLnLinearGelu: "Gpt2Step",
      kTaskLinearResidual: null,
      kTaskLnLmHeadArgmax: "Gpt2Step",
      kTaskRmsQkvRope: "LlamaStep",
      kTaskRmsGateUp: "LlamaStep",
      kTaskRmsLmHeadArgmax: "LlamaStep",
    });
    expect([...cases.keys()].some((n) => /\blines\(|_lines</.test(lines[n - 1]!))).toBe(false);
    // each task kind names the op family whose body it runs
    expect([...new Set(cases.values())].map(taskFamily)).toEqual([
      "embed",
      "ln_qkv",
      "attention",
      "ln_linear_gelu",
      "linear_residual",
      "ln_lm_head_argmax",
      "rms_qkv_rope",
      "rms_gate_up",
      "rms_lm_head_argmax",
    ]);
    expect(taskFamily("kTaskNoSuchOp")).toBeNull();
  });

  test("registers per kernel from the ELF listing", () => {
    const elf =
      "\tValue:\tfunction: _Z7batchedPfPKf(0x13)\tregister count: 62\n\tValue:\tfunction: _Z6serialPfPKf(0x12)\tframe size: 0x0";
    expect([...parseRegisterCounts(elf)]).toEqual([["_Z7batchedPfPKf", 62]]);
  });

  test("a requirement fails below its loads or above its registers, and on local memory", () => {
    const fns = parseSass(`${batched}\n${serial}`);
    fns[0]!.registers = 40;
    fns[1]!.registers = 40;
    const rows = sassChecks(fns, facts, [
      { kernel: "batched", minWideLoads: 4, maxRegisters: 64, why: "" },
      { kernel: "serial", minWideLoads: 4, maxRegisters: 64, why: "" },
      { kernel: "batched", minWideLoads: 4, maxRegisters: 32, why: "" },
    ]);
    expect(rows.map((r) => r.status)).toEqual(["pass", "fail", "fail", "fail", "pass", "fail"]); // + local memory, fences, programmatic launch
  });

  test("a sequentially consistent fence in a step kernel fails; a persistent step kernel whose poll never sleeps fails", () => {
    const fenced = listing("_Z6mergedPj", [
      "ACQBULK",
      "MEMBAR.SC.GPU",
      "ATOM.E.ADD.STRONG.GPU PT, R0, desc[UR4][R2.64], R5",
      "EXIT",
    ]);
    const released = listing("_Z8releasedPj", [
      "ACQBULK",
      "MEMBAR.ALL.GPU",
      "ATOM.E.ADD.STRONG.GPU PT, R0, desc[UR4][R2.64], R5",
      "EXIT",
    ]);
    const probe = listing("_Z27runtime_grid_barrier_kernelILb1EEvPjix", ["MEMBAR.SC.GPU", "EXIT"]); // the runtime's probe is no step kernel
    const spinning = listing("_Z22persistent_step_kernelIfLi1EEvPK8StepTaskiP11StepBarrier", [
      "ACQBULK",
      "LD.E.STRONG.GPU R4, desc[UR4][R2.64]",
      "CCTL.E.PF2 [R6]",
      "EXIT",
    ]);
    const sleeping = spinning
      .replace("CCTL.E.PF2 [R6]", "CCTL.E.PF2 [R6] ;  /* 0x0 */\n        /*0040*/  NANOSLEEP R0")
      .replace("Function : _Z22persistent_step_kernelIfLi1E", "Function : _Z22persistent_step_kernelIfLi2E");
    const row = (fns: SassFunction[], check: string) => sassChecks(fns, facts, []).find((r) => r.check === check)!;
    expect(row(parseSass(`${fenced}\n${released}\n${probe}`), "sass fences")).toMatchObject({
      status: "fail",
      detail: expect.stringContaining("merged (1)"),
    });
    expect(row(parseSass(`${released}\n${probe}`), "sass fences").status).toBe("pass");
    const poll = row(parseSass(`${spinning}\n${sleeping}`), "sass persistent poll");
    expect(poll.status).toBe("fail");
    expect(poll.detail).toContain("persistent_step_kernel<float, 1>");
    expect(poll.detail).not.toContain("persistent_step_kernel<float, 2>");
    expect(row(parseSass(sleeping), "sass persistent poll").status).toBe("pass");
  });
});

/** A local-memory row of a planted library: passing, or failing in persistent step kernels only. */
function expectOnlyPersistentSpills(local: { status: string; detail: string }) {
  if (local.status === "fail")
    expect(local.detail.replace(/^LDL\/STL in /, "").replace(/persistent_step_kernel<[^>]*>(, )?/g, "")).toBe("");
}

const cuobjdump = findCuobjdump();
const skipReason = !hasNvcc()
  ? "nvcc not found (set NVCC or CUDA_HOME)"
  : !cuobjdump
    ? "no cuobjdump in $CUDA_HOME/bin or ../shared/cuda-binutils"
    : null;
if (skipReason) console.log(`sass.test.ts: skipping the built library's SASS checks: ${skipReason}`);

describe.skipIf(skipReason !== null)("the built CUDA library's SASS", () => {
  let disassembled: SassFunction[] | undefined;
  /** the library's kernels, disassembled once */
  const library = () => (disassembled ??= librarySassFunctions(ensureBuilt("cuda", { quiet: true }).path, cuobjdump!));
  let builtFacts: KernelFacts | undefined;
  /** the kernel facts of the library whose SASS is read, and its requirements */
  const built = () => (builtFacts ??= libraryKernelFacts(ensureBuilt("cuda", { quiet: true }).path));
  const requirements = () => sassRequirements(built());

  test("every hot kernel keeps its loads in flight within its register budget; no local memory; every step kernel waits and loads coherently", () => {
    const fns = library();
    const rows = sassChecks(fns, built());
    for (const r of rows) console.log(`${r.status}  ${r.check}: ${r.detail}`);
    // the persistent kernels' bodies are read through nvdisasm's source lines: skipped, and said so, without it
    const unread = (r: (typeof rows)[number]) =>
      !findNvdisasm() && r.check === "sass persistent bodies" && r.status === "skip";
    expect(rows.filter((r) => r.status !== "pass" && !unread(r))).toEqual([]);
    expect(rows).toHaveLength(requirements().length + 6); // + local memory, the persistent bodies, look-ahead and poll, fences, programmatic launch
  }, 600_000);

  /** The requirements of the matvec family: every storage type and row count. */
  const matvecs = () =>
    requirements()
      .filter((r) =>
        /^(linear_matvec|ln_qkv|ln_linear_gelu|linear_residual|rms_qkv_rope|rms_gate_up)_kernel</.test(r.kernel),
      )
      .map((r) => r.kernel);

  test("the matvecs issue their 8 weight loads before waiting for the predecessor (programmatic launch prefetches them)", () => {
    const fns = library();
    expect(matvecs()).toHaveLength(6 * 3 * 4); // 6 ops x fp32, bf16, f16 x 1, 2, 4, 8 rows
    for (const name of matvecs())
      expect([name, sassFacts(fns.find((f) => f.kernel === name)!).wideLoadsBeforeWait]).toEqual([name, 8]);
  }, 600_000);

  test("the kernel model's loads per thread for GPT-2 small's hot kernels (and Qwen3's at heads of 256, the wide attention) never exceed what their SASS holds in flight, in every storage type and batch", () => {
    const sass = library().map(sassFacts);
    const hot = new Set(requirements().map((r) => r.kernel));
    const forms = [
      [1, "f32"],
      [4, "bf16"],
      [8, "f16"],
      [3, "f32"],
    ] as const;
    const wideHeads: ModelConfig = { ...LLAMA_PRESETS["qwen3-0.6b"]!, head_dim: 256 };
    const checked = new Set<string>();
    for (const [batch, dtype] of forms)
      for (const [cfg, plan] of [
        ...PLAN_KINDS.map((p) => [PRESETS.gpt2!, p] as const),
        [wideHeads, "unfused"] as const,
      ])
        for (const op of planShapeOf(cfg, 1, { plan, batch, weights: dtype, kv: dtype })) {
          const name = kernelOf(op, built());
          if (!hot.has(name)) continue;
          checked.add(name);
          const f = factsFor(op, sass, built())!;
          expect(f.kernel).toBe(name);
          expect(activeLoads(op, built())).toBeLessThanOrEqual(f.wideLoadsInFlight!);
        }
    expect([...checked].filter((k) => k.startsWith("attention_wide_kernel")).sort()).toEqual([
      "attention_wide_kernel<__half, 8>",
      "attention_wide_kernel<__nv_bfloat16, 8>",
      "attention_wide_kernel<float, 4>",
    ]);
  }, 600_000);

  test("planted serialisation (-DPLANT_SERIAL_MATVEC, #pragma unroll 1 in the matvec) fails the check in every matvec instantiation, and only there", () => {
    const path = ensureBuilt("cuda", {
      quiet: true,
      extraFlags: ["-DPLANT_SERIAL_MATVEC"],
      variant: "planted_serial",
    }).path;
    const rows = sassChecks(librarySassFunctions(path, cuobjdump!), built());
    // the persistent step kernels inline the planted matvec too: they may spill with it (and only they), and the
    // check of their bodies fails on the matvec bodies, and only on them
    const local = rows.find((r) => r.check === "sass local memory")!;
    expectOnlyPersistentSpills(local);
    const bodies = rows.find((r) => r.check === "sass persistent bodies")!;
    const shortBodies = bodies.detail
      .replace(/^too few 16-byte loads in flight: /, "")
      .split("; ")
      .map((s) => s.replace(/^persistent_step_kernel<[^>]*> /, "").split(" ")[0]);
    expect(bodies.status).toBe(findNvdisasm() ? "fail" : "skip");
    if (bodies.status === "fail") {
      expect(new Set(shortBodies)).toEqual(
        new Set(["ln_qkv", "ln_linear_gelu", "linear_residual", "rms_qkv_rope", "rms_gate_up"]),
      );
      expect(shortBodies).toHaveLength(2 * 12 * 3); // every persistent kernel's three matvec bodies, both architectures'
    }
    const failed = rows.filter((r) => r.status === "fail" && r !== local && r !== bodies).map((r) => r.check);
    expect(failed).toEqual(matvecs().map((k) => `sass ${k}`));
    for (const kernel of ["linear_matvec_kernel<float, 4, 1>", "ln_qkv_kernel<__nv_bfloat16, 8, 8>"])
      expect(rows.find((r) => r.check === `sass ${kernel}`)!.detail).toMatch(/^1 x 16-byte loads/);
  }, 1_800_000); // nvcc builds the whole planted library: past 10 min with both cores busy (2026-12-07)

  test("planted task arguments in global memory (-DPLANT_TASK_IN_GLOBAL, the persistent kernel's first version) fail the persistent bodies, and only them", () => {
    const path = ensureBuilt("cuda", {
      quiet: true,
      extraFlags: ["-DPLANT_TASK_IN_GLOBAL"],
      variant: "planted_task",
    }).path;
    const rows = sassChecks(librarySassFunctions(path, cuobjdump!), built());
    // the planted kernel reloads its arguments, which may make the persistent kernels (and only they) spill
    const local = rows.find((r) => r.check === "sass local memory")!;
    expectOnlyPersistentSpills(local);
    const failed = rows.filter((r) => r.status !== "pass" && r !== local);
    if (!findNvdisasm())
      return void expect(failed.map((r) => [r.check, r.status])).toEqual([["sass persistent bodies", "skip"]]);
    expect(failed.map((r) => r.check)).toEqual(["sass persistent bodies"]);
    // each body reloads its arguments around its weight loads: the matvecs and the LM head keep fewer than 8 in flight
    // (1 to 4, as ptxas schedules the whole kernel)
    const short = failed[0]!.detail
      .replace(/^too few 16-byte loads in flight: /, "")
      .split("; ")
      .map((s) => s.replace(/^persistent_step_kernel<[^>]*> /, ""));
    expect(new Set(short.map((s) => s.split(" ")[0]))).toEqual(
      new Set([
        "ln_qkv",
        "ln_linear_gelu",
        "linear_residual",
        "ln_lm_head_argmax",
        "rms_qkv_rope",
        "rms_gate_up",
        "rms_lm_head_argmax",
      ]),
    );
    for (const s of short) expect(s).toMatch(/^\w+ [1-4] \(< 8\)$/);
  }, 1_800_000); // nvcc builds the whole planted library: past 10 min with both cores busy (2026-12-07)
});
