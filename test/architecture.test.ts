// The layers of src/, bottom to top, and the rule that holds them: a module imports only from its own layer
// or a lower one, and no import loop exists. The README's layout section states the same order.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const SRC = join(import.meta.dir, "../src");

/** Bottom to top: path prefixes under src/ of each layer. */
const LAYERS: { name: string; paths: string[] }[] = [
  { name: "vocabulary", paths: ["errors.ts", "stats.ts", "words.ts", "ops.ts"] },
  { name: "model", paths: ["model/"] },
  { name: "native", paths: ["native/"] },
  { name: "plan", paths: ["plan.ts", "plan-gpt2.ts", "plan-llama.ts", "plans.ts"] },
  { name: "backends", paths: ["backends/"] },
  { name: "run", paths: ["run/"] },
  { name: "peers", paths: ["peers/"] },
  { name: "profile and verify", paths: ["profile/", "verify/"] },
  { name: "report", paths: ["report/"] },
  { name: "cli", paths: ["cli/"] },
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [relative(SRC, join(dir, e.name))] : [],
  );
}

function layerOf(file: string): number {
  return LAYERS.findIndex((l) => l.paths.some((p) => (p.endsWith("/") ? file.startsWith(p) : file === p)));
}

/** The project files a source file imports (static, re-exports, dynamic), as paths relative to src/. */
function importsOf(file: string, text = readFileSync(join(SRC, file), "utf8")): string[] {
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*"([^"]+)"/gms),
    ...text.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g),
  ].map((m) => m[1]!);
  return specifiers.filter((s) => s.startsWith(".")).map((s) => relative(SRC, resolve(SRC, dirname(file), s)));
}

const files = sourceFiles(SRC);
const graph = new Map(files.map((f) => [f, importsOf(f)]));

/** One import loop through `graph`, as the files around it, or null. */
function findLoop(g: Map<string, string[]>): string[] | null {
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (f: string): string[] | null => {
    if (state.get(f) === "done") return null;
    if (state.get(f) === "open") return [...path.slice(path.indexOf(f)), f];
    state.set(f, "open");
    path.push(f);
    for (const next of g.get(f) ?? []) {
      const loop = visit(next);
      if (loop) return loop;
    }
    path.pop();
    state.set(f, "done");
    return null;
  };
  for (const f of g.keys()) {
    const loop = visit(f);
    if (loop) return loop;
  }
  return null;
}

describe("architecture: layers point one way", () => {
  test("every source file sits in a layer", () => {
    expect(files.filter((f) => layerOf(f) < 0)).toEqual([]);
  });

  test("no module imports from a layer above its own", () => {
    const upward = [...graph].flatMap(([file, imports]) =>
      imports
        .filter((to) => layerOf(to) > layerOf(file))
        .map((to) => `${file} (${LAYERS[layerOf(file)]!.name}) → ${to} (${LAYERS[layerOf(to)]!.name})`),
    );
    expect(upward).toEqual([]);
  });

  test("there is no import loop", () => {
    expect(findLoop(graph)).toBeNull();
  });

  test("the checker sees every kind of import, and finds a planted loop and an upward import", () => {
    const text =
      'import type { A } from "../a.ts";\nimport {\n  b,\n} from "./b.ts";\nexport { c } from "../c.ts";\nconst d = await import("./d.ts");';
    expect(importsOf("run/x.ts", text)).toEqual(["a.ts", "run/b.ts", "c.ts", "run/d.ts"]);
    expect(
      findLoop(
        new Map([
          ["a.ts", ["b.ts"]],
          ["b.ts", ["c.ts"]],
          ["c.ts", ["a.ts"]],
        ]),
      ),
    ).toEqual(["a.ts", "b.ts", "c.ts", "a.ts"]);
    expect(layerOf("plan.ts")).toBeGreaterThan(layerOf("ops.ts"));
    expect(layerOf("report/markdown.ts")).toBeGreaterThan(layerOf("profile/summary.ts"));
  });
});
