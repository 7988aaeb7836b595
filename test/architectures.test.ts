// The registry of architecture families (src/model/architectures.ts): every preset and HF architecture belongs to
// exactly one family, and the generic facts read from it agree with each family's own.
import { describe, expect, test } from "bun:test";

import { ALL_PRESETS, ARCHITECTURES, familyNameOf, kvColumns, MODEL_FAMILIES } from "../src/model/architectures.ts";
import { shapeOf } from "../src/model/kv.ts";
import { DEFAULT_STEP_FORM } from "../src/plan.ts";
import { planShapeOf } from "../src/plans.ts";

const families = Object.entries(MODEL_FAMILIES);

describe("architecture registry", () => {
  test("each preset is owned by exactly one family, the one that lists it", () => {
    for (const [name, family] of families)
      for (const cfg of Object.values(family.presets)) {
        expect(families.filter(([, f]) => f.owns(cfg)).map(([n]) => n)).toEqual([name]);
        expect(familyNameOf(cfg)).toBe(name as keyof typeof MODEL_FAMILIES);
      }
    const count = families.reduce((n, [, f]) => n + Object.keys(f.presets).length, 0);
    expect(Object.keys(ALL_PRESETS)).toHaveLength(count); // no name in two families
  });

  test("every HF architecture name maps to one family's model_type", () => {
    const names = families.flatMap(([, f]) => Object.keys(f.architectures));
    expect(new Set(names).size).toBe(names.length);
    expect(Object.keys(ARCHITECTURES).sort()).toEqual([...names].sort());
    expect(ARCHITECTURES.GPT2LMHeadModel).toBe("gpt2");
    expect(ARCHITECTURES.Qwen3ForCausalLM).toBe("qwen3");
  });

  test("a preset's shape, cache width and plan come from its family", () => {
    for (const [, family] of families)
      for (const cfg of Object.values(family.presets)) {
        const shape = shapeOf(cfg);
        expect(shape.family).toBe(family.shapeFamily);
        expect(shape.kv_heads * shape.head_dim).toBe(kvColumns(cfg));
        expect(shape.parameters).toBe(family.parameterCount(cfg));
        expect(Object.values(family.architectures)).toContain(family.modelType(cfg));
        const ops = planShapeOf(cfg, 1, DEFAULT_STEP_FORM);
        expect(new Set(ops.flatMap((op) => (op.layer === null ? [] : [op.layer]))).size).toBe(cfg.n_layer);
      }
  });
});
