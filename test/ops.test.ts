// The op table (src/ops.ts) is the one source of the op list: the C side is generated from it and checked
// against cuda/ops.h at compile time; every consumer derives from it.
import { describe, expect, test } from "bun:test";
import { FFIType } from "bun:ffi";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { OP_SYMBOLS } from "../src/native/symbols.ts";
import { writeGeneratedHeaders } from "../src/native/build.ts";
import {
  attendedKeys,
  DTYPES,
  floatParams,
  kernelFamily,
  namedArgs,
  OP_FAMILIES,
  opTableHeader,
  OPS,
  PLAN_SLOTS,
  positionalArgs,
  workOf,
} from "../src/ops.ts";
import { encodePlan, planOp } from "../src/plan.ts";

const ROOT = join(import.meta.dir, "..");

/** Compiles cuda/plan.cpp (syntax only) against a generated op table; returns g++'s exit code and messages. */
function compilePlanAgainst(header: string): { code: number; stderr: string } {
  const dir = mkdtempSync(join(tmpdir(), "op-table-"));
  try {
    writeFileSync(join(dir, "op_table.h"), header);
    const p = Bun.spawnSync(["g++", "-std=c++20", "-fsyntax-only", `-I${dir}`, "-Icuda", "cuda/plan.cpp"], {
      cwd: ROOT,
    });
    return { code: p.exitCode, stderr: p.stderr.toString() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("the op table", () => {
  test("opcodes are distinct and every op's arguments fit a plan record", () => {
    const codes = OP_FAMILIES.map((f) => OPS[f].code);
    expect(new Set(codes).size).toBe(codes.length);
    for (const f of OP_FAMILIES) expect(OPS[f].params.length).toBeLessThan(PLAN_SLOTS);
  });

  test("bun:ffi signatures come from the table: a pointer is ptr, an int i32, a float f32", () => {
    const { ptr, i32, f32 } = FFIType;
    expect(OP_SYMBOLS.op_layernorm.args).toEqual([ptr, ptr, ptr, ptr, i32, i32, f32]);
    expect(OP_SYMBOLS.op_argmax.args).toEqual([ptr, ptr, ptr, ptr, i32, i32, i32, i32]);
    expect(OP_SYMBOLS.op_linear.args).toEqual([ptr, ptr, ptr, ptr, ptr, i32, i32, i32, i32]);
    for (const f of OP_FAMILIES) expect(OP_SYMBOLS[`op_${f}`].args.length).toBe(OPS[f].params.length);
    expect(floatParams("layernorm")).toEqual([6]);
    expect(floatParams("linear")).toEqual([]);
  });

  test("named arguments go to signature order and back; a missing or extra name is an error", () => {
    const args = { out: 1, partials: 9, inp: 2, weight: 3, bias: 4, rows: 5, C: 6, OC: 7, wdtype: 0 };
    expect(positionalArgs("linear", args)).toEqual([1, 9, 2, 3, 4, 5, 6, 7, 0]);
    expect(namedArgs("linear", [1, 9, 2, 3, 4, 5, 6, 7, 0])).toEqual(args);
    const { OC: _, ...missing } = args;
    expect(() => positionalArgs("linear", missing as typeof args)).toThrow(/do not match/);
    expect(() => positionalArgs("linear", { ...args, extra: 8 } as typeof args)).toThrow(/do not match/);
  });

  test("a plan op carries its work and its output, and encodes with its opcode and the float's bit pattern", () => {
    const op = planOp("layernorm", "ln", null, { out: 16, inp: 32, weight: 48, bias: 64, rows: 2, C: 8, eps: 0.5 });
    expect(op.work(0)).toEqual(
      workOf({ flops: 8 * 16, activations: 32, weights: 0, vectors: 16, kv: 0, token_ids: 0 }),
    );
    expect(op.output).toEqual({ ptr: 16, floats: 2 * 8 });
    expect(
      planOp("argmax", "argmax", null, { seq: 1, state: 2, partials: 4, logits: 3, B: 1, V: 10, T: 1, max_ctx: 8 })
        .output,
    ).toBeNull();
    const { records } = encodePlan([op]);
    expect(Number(records[0])).toBe(OPS.layernorm.code);
    expect(Array.from(records.slice(1, 7), Number)).toEqual([16, 32, 48, 64, 2, 8]);
    expect(Number(records[7])).toBe(new Uint32Array(Float32Array.of(0.5).buffer)[0]!);
  });

  test("attention's work grows with the keys attended", () => {
    const args = {
      out: 0,
      scratch: 0,
      qkv: 0,
      k_cache: 0,
      v_cache: 0,
      state: 0,
      B: 1,
      T: 1,
      C: 768,
      n_head: 12,
      n_kv_head: 12,
      max_ctx: 1024,
      kvdtype: DTYPES.f32 as number,
    };
    const at = (pos: number, more: Partial<typeof args> = {}) =>
      planOp("attention", "a", 0, { ...args, ...more }).work(pos);
    expect(attendedKeys(1, 99)).toBe(100);
    expect(at(99).kv_bytes).toBe(4 * 2 * 100 * 768);
    expect(at(999).flops).toBeGreaterThan(at(99).flops);
    expect(at(99, { kvdtype: DTYPES.bf16 }).kv_bytes).toBe(2 * 2 * 100 * 768); // a bf16 cache moves half the bytes
    expect(at(99, { B: 4 }).kv_bytes).toBe(4 * 4 * 2 * 100 * 768); // each sequence reads its own rows
  });
});

describe("kernel names map to op families", () => {
  test.each([
    ["layernorm_kernel", "layernorm"],
    ["void linear_matvec_kernel<4>(float*, float const*, float const*, float const*, int, int, int)", "linear"],
    ["linear_tiled_kernel(float*, float const*)", "linear"],
    ["kv_append_kernel", "kv_append"],
    ["lm_head_kernel", "lm_head"],
    ["runtime_fill_u32_kernel", null],
    ["embedding_lookup", null],
  ] as const)("%s → %s", (name, family) => {
    expect(kernelFamily(name)).toBe(family);
  });
});

describe("the C side is generated from the table", () => {
  test("op_table.h lists every op with its code and C signature, and the ABI constants", () => {
    const header = opTableHeader();
    for (const f of OP_FAMILIES) expect(header).toContain(`X(OP_${f.toUpperCase()}, op_${f}, ${OPS[f].code}, void(`);
    expect(header).toContain(`PLAN_SLOTS = ${PLAN_SLOTS}`);
  });

  test("cuda/plan.cpp compiles against the table", () => {
    const { code, stderr } = compilePlanAgainst(opTableHeader());
    expect(stderr).toBe("");
    expect(code).toBe(0);
  });

  test("a table row that disagrees with its prototype in cuda/ops.h fails the build, naming the op", () => {
    const wrong = {
      ...OPS,
      linear: { ...OPS.linear, params: OPS.linear.params.map(([n, t]) => [n, n === "OC" ? "float" : t] as const) },
    };
    const { code, stderr } = compilePlanAgainst(opTableHeader(wrong));
    expect(code).not.toBe(0);
    expect(stderr).toContain("op_linear in cuda/ops.h differs from its row in src/ops.ts");
  });

  test("the header the native builds include is the table's", async () => {
    expect(await Bun.file(join(writeGeneratedHeaders(), "op_table.h")).text()).toBe(opTableHeader());
  });
});
