// biome-ignore-all lint/suspicious/noExplicitAny: summaries taken apart field by field, on purpose
import { describe, expect, test } from "bun:test";
import { validateSummary } from "../src/report/schema.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

/** A deep copy that can be broken freely. */
const copy = (): Record<string, any> => JSON.parse(JSON.stringify(syntheticSummary()));

describe("validateSummary", () => {
  test("a synthetic summary validates", () => {
    expect(validateSummary(syntheticSummary())).toEqual([]);
  });

  test("a missing field fails", () => {
    const s = copy();
    delete s.memory.weight_bytes;
    expect(validateSummary(s)).toEqual(["/memory: must have required property 'weight_bytes'"]);
  });

  test("a wrong type fails", () => {
    const s = copy();
    s.points[0].device_ms.median = "5 ms";
    expect(validateSummary(s)).toEqual(["/points/0/device_ms/median: must be number"]);
  });

  test("an unknown mode, an extra field and a bad date fail", () => {
    const s = copy();
    s.settings.modes = ["eager", "turbo"];
    s.surprise = true;
    s.date = "yesterday";
    const problems = validateSummary(s);
    expect(problems).toContain("/: must NOT have additional properties (surprise)");
    expect(problems).toContain("/settings/modes/1: must be equal to one of the allowed values");
    expect(problems).toContain('/date: must match format "date-time"');
  });

  test("optional breakdown and split may be absent; a seed row may lack a mode, and its speedup may be null", () => {
    const s = copy();
    delete s.points[0].breakdown;
    delete s.points[0].split;
    delete s.seed_table[0].cached.graph;
    s.seed_table[0].uncached_ms = null;
    s.seed_table[0].cached.eager.speedup = null;
    expect(validateSummary(s)).toEqual([]);
  });

  test("a seed row keyed by an unknown mode fails", () => {
    const s = copy();
    s.seed_table[0].cached.warp = { ms: 1, speedup: null };
    expect(validateSummary(s).join(" ")).toMatch(/seed_table\/0\/cached/);
  });
});
