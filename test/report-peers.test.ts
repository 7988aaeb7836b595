// summary.json's peers section from synthetic measurements: its numbers, its schema, and how report.md,
// the terminal and the latency plot show it.
import { describe, expect, test } from "bun:test";

import { XMLValidator } from "fast-xml-parser";

import type { PeerSubject } from "../src/peers/peer-set.ts";
import { agreementOf, buildPeersSection, partingOf } from "../src/profile/peers-summary.ts";
import type { ProfileSummary } from "../src/profile/types.ts";
import { renderReport } from "../src/report/markdown.ts";
import { peerSentences } from "../src/report/sections.ts";
import { renderTerminalSummary } from "../src/report/terminal.ts";
import { validateSummary } from "../src/report/schema.ts";
import { latencyChart } from "../src/report/charts.ts";
import { withoutColour } from "./helpers/expect.ts";
import { syntheticSummary } from "./helpers/synthetic-profile.ts";

withoutColour();

const subject = (peer: PeerSubject["peer"], variant: string, short: string): PeerSubject => ({
  id: `${peer}:${variant}`,
  peer,
  variant,
  short,
  label: `${short} (label)`,
  version: "v1",
  device: "CPU (cpu)",
  settings: { threads: 2, blas: "OpenBLAS" },
});
const subjects = [subject("torch", "seed", "PyTorch seed-style"), subject("llama.cpp", "fa-on", "llama.cpp FA on")];
const reference = Array.from({ length: 20 }, (_, i) => 100 + i);
const best = new Map([
  [4, { mode: "graph", ms: 2 }],
  [32, { mode: "graph", ms: 4 }],
]);

function withPeers(): ProfileSummary {
  const peers = buildPeersSection(
    {
      subjects,
      samples: new Map([
        [
          "torch:seed",
          new Map([
            [4, [3, 3.2, 2.8]],
            [32, [4.4, 4.4, 4.4]],
          ]),
        ],
        [
          "llama.cpp:fa-on",
          new Map([
            [4, [1, 1, 1]],
            [32, [2, 2.2, 1.8]],
          ]),
        ],
      ]),
      traces: [
        {
          context: 32,
          unit: "torch calls",
          ops_per_step: 55,
          torch_calls: 55,
          step_ms: 5,
          host_issue_ms: 2,
          launch_api_ms: 0,
          busy_ms: 3,
          idle_ms: 2,
        },
      ],
      generated: new Map([
        ["torch:seed", reference],
        ["llama.cpp:fa-on", [...reference.slice(0, 7), 1, ...reference.slice(8)]],
      ]),
      // the agreeing subject's entry is dropped: a subject that agrees has no parting
      partings: new Map([
        ["llama.cpp:fa-on", { rank: 2, margin: 3.6e-4 }],
        ["torch:seed", { rank: 9, margin: 0.5 }],
      ]),
      skipped: [
        {
          name: "torch:graph (PyTorch static cache, CUDA graph replay)",
          reason: "needs CUDA (this run is on the CPU)",
        },
      ],
    },
    {
      prompt: [1, 2, 3],
      reference,
      bestAt: (c) => best.get(c) ?? null,
      floorAt: (c) => c / 16,
      method: "Interleaved step by step.",
    },
  );
  return { ...syntheticSummary(), peers };
}

describe("the peers section", () => {
  const s = withPeers();
  const seed = s.peers!.results[0]!;
  const llama = s.peers!.results[1]!;

  test("median per context against the project's fastest mode and the floor; agreement before the first difference", () => {
    expect(
      seed.points.map((p) => [p.context, p.ms.median, p.best_mode, p.ratio_to_best_mode, p.floor_ms, p.ratio_to_floor]),
    ).toEqual([
      [4, 3, "graph", 1.5, 0.25, 12],
      [32, 4.4, "graph", 1.1, 2, 2.2],
    ]);
    expect(seed.agreement).toEqual({ matched: 20, of: 20, agrees: true, tokens: reference, parted: null });
    expect(llama.agreement!.matched).toBe(7);
    expect(llama.agreement!.agrees).toBe(false);
    expect(llama.agreement!.parted).toEqual({ rank: 2, margin: 3.6e-4 });
  });

  test("validates against the schema, and a broken one does not", () => {
    expect(validateSummary(s)).toEqual([]);
    const broken = JSON.parse(JSON.stringify(s));
    broken.peers.results[0].agreement.matched = "all";
    broken.peers.torch_dispatch[0].extra = 1;
    broken.peers.results[1].agreement.parted.rank = 0;
    const problems = validateSummary(broken);
    expect(problems.some((p) => p.startsWith("/peers/results/0/agreement"))).toBe(true);
    expect(problems.some((p) => p.startsWith("/peers/results/1/agreement/parted/rank"))).toBe(true);
    expect(problems).toContain("/peers/torch_dispatch/0: must NOT have additional properties (extra)");
  });

  test("sentences: the project's ratio to each peer, the disagreeing peer flagged, PyTorch's dispatch split, what did not run", () => {
    const lines = peerSentences(s);
    expect(lines[0]).toBe(
      "Peers at context 32, same weights, same run: the project's fastest mode (graph) takes 4.000 ms per token; PyTorch seed-style 4.400 ms (1.10× the project's time), " +
        "llama.cpp FA on 2.000 ms (0.50× the project's time); the memory floor there is 2.000 ms (the project at 2.00× it).",
    );
    expect(lines[1]).toBe(
      "Greedy tokens: llama.cpp FA on DISAGREES (7/20 before the first difference; there the project's logits rank its token #2, " +
        "0.00036 of the largest logit below the project's: a near-tie (the runner-up within 0.001 of it), which another summation order may flip); " +
        "1 of 2 peers agree on all 20 generated.",
    );
    expect(lines[2]).toMatch(
      /^PyTorch seed-style at context 32, .*55 torch calls per token; the host spends 2\.000 ms between them \(40%/,
    );
    expect(lines[3]).toBe(
      "Not run: torch:graph (PyTorch static cache, CUDA graph replay): needs CUDA (this run is on the CPU).",
    );
  });

  test("report.md and the terminal show the table with the project's reference rows", () => {
    const md = renderReport(s);
    expect(md).toContain("## Peers: PyTorch and llama.cpp on the same weights");
    expect(md).toContain("| decode-floor graph (fastest mode) | 32 | 4.000 | – | – | 1.00× | 2.00× | reference |");
    expect(md).toContain("| PyTorch seed-style | 32 | 4.400 | 4.400 | 4.400 | 1.10× | 2.20× | 20/20 |");
    expect(md).toContain(
      "| llama.cpp FA on | 4 | 1.000 | 1.000 | 1.000 | 0.50× | 4.00× | 7/20 DISAGREES (its token our #2, 0.00036 below) |",
    );
    const terminal = renderTerminalSummary(s);
    expect(terminal).toContain("Peers: PyTorch and llama.cpp on the same weights");
    expect(terminal).toContain("• Greedy tokens: llama.cpp FA on DISAGREES");
    expect(renderReport(syntheticSummary())).not.toContain("Peers");
  });

  test("the latency plot draws each peer as a dotted line beside the modes", () => {
    const svg = latencyChart(s);
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg).toContain(">PyTorch seed-style</text>");
    expect(svg).toContain(">llama.cpp FA on</text>");
    expect(svg.match(/stroke-dasharray="2 3"/g)!.length).toBe(4); // two lines, two legend swatches
  });
});

test("agreementOf counts the tokens before the first difference", () => {
  expect(agreementOf([1, 2, 3], [1, 2, 3])).toEqual({
    matched: 3,
    of: 3,
    agrees: true,
    tokens: [1, 2, 3],
    parted: null,
  });
  expect(agreementOf([1, 9, 3], [1, 2, 3]).matched).toBe(1);
  expect(agreementOf([1, 2], [1, 2, 3])).toMatchObject({ matched: 2, agrees: false, parted: null });
  expect(agreementOf([1, 9, 3], [1, 2, 3], { rank: 4, margin: 0.1 }).parted).toEqual({ rank: 4, margin: 0.1 });
});

test("partingOf ranks the peer's token among the project's logits, its gap relative to the largest |logit|", () => {
  const logits = new Float32Array([0.5, -4, 3.9, 4, 1]); // the project chose 3 (4.0)
  expect(partingOf(logits, 3, 2).rank).toBe(2);
  expect(partingOf(logits, 3, 2).margin).toBeCloseTo(0.025, 6);
  expect(partingOf(logits, 3, 4).rank).toBe(3);
  expect(partingOf(logits, 3, 1)).toEqual({ rank: 5, margin: 2 });
});
