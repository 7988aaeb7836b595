import { describe, expect, test } from "bun:test";
import { XMLParser, XMLValidator } from "fast-xml-parser";
import { escapeXml, lineChart, niceTicks, stackedBars } from "../src/report/svg.ts";

const caption = "test-host (Synthetic CPU) · Synthetic GPU <sm_90> & co · 2025-01-02";

const latency = () =>
  lineChart({
    title: "Decode step latency vs context",
    xTitle: "context (tokens, log2)",
    yTitle: "time per token (ms)",
    y2Title: "FLOP ratio uncached / cached (×)",
    series: [
      {
        name: "no cache",
        points: [
          { x: 1, y: 5.1 },
          { x: 16, y: 6.2 },
          { x: 1000, y: 31 },
        ],
      },
      {
        name: "KV cache eager",
        points: [
          { x: 1000, y: 5.2 },
          { x: 1, y: 5 },
          { x: 16, y: 5.1 },
        ],
      },
      {
        name: "KV cache <graph>",
        points: [
          { x: 1, y: 1.1 },
          { x: 16, y: 1.2 },
          { x: 1000, y: 1.8 },
        ],
      },
      {
        name: "FLOP ratio",
        axis: "right",
        points: [
          { x: 1, y: 1.9 },
          { x: 16, y: 15 },
          { x: 1000, y: 417 },
        ],
      },
    ],
    caption,
  });

const breakdown = () =>
  stackedBars({
    title: "Where a token's step goes",
    yTitle: "time per token (ms)",
    bars: [
      {
        label: "eager",
        segments: [
          { key: "linear", value: 1.2 },
          { key: "attention", value: 0.3 },
          { key: "idle", value: 3.7 },
        ],
      },
      {
        label: "graph",
        segments: [
          { key: "linear", value: 1.2 },
          { key: "attention", value: 0.3 },
          { key: "idle", value: 0.3 },
        ],
      },
    ],
    caption,
  });

function parse(svg: string) {
  expect(XMLValidator.validate(svg)).toBe(true);
  return new XMLParser({ ignoreAttributes: false, attributeNamePrefix: "" }).parse(svg);
}

/** Every numeric attribute value in the document. */
function numericAttributes(svg: string): string[] {
  return [...svg.matchAll(/\s(?:x|y|x1|x2|y1|y2|cx|cy|width|height|r)="([^"]*)"/g)].map((m) => m[1]!);
}

function legendNames(svg: string): string[] {
  const doc = parse(svg);
  const entries = doc.svg.g.filter((g: { class: string }) => g.class === "legend-entry");
  return entries.map((g: { text: { "#text": string } }) => g.text["#text"]);
}

describe("lineChart", () => {
  test("is valid XML with escaped text, a legend entry per series, and finite coordinates", () => {
    const svg = latency();
    parse(svg);
    expect(legendNames(svg)).toEqual(["no cache", "KV cache eager", "KV cache <graph>", "FLOP ratio"]); // decoded by the parser
    expect(svg).toContain("KV cache &lt;graph&gt;");
    expect(svg).toContain("Synthetic GPU &lt;sm_90&gt; &amp; co");
    for (const v of numericAttributes(svg)) expect(Number.isFinite(Number(v))).toBe(true);
    expect(svg).not.toContain("NaN");
    const polylines = [...svg.matchAll(/points="([^"]*)"/g)].map((m) => m[1]!);
    for (const pts of polylines) for (const n of pts.split(/[ ,]/)) expect(Number.isFinite(Number(n))).toBe(true);
  });

  test("has axis titles with units, power-of-two ticks and a dashed second-axis series", () => {
    const svg = latency();
    expect(svg).toContain("time per token (ms)");
    expect(svg).toContain("context (tokens, log2)");
    expect(svg).toContain("FLOP ratio uncached / cached (×)");
    for (const tick of ["1", "2", "512", "1024"]) expect(svg).toContain(`>${tick}</text>`);
    expect(svg.match(/stroke-dasharray/g)?.length).toBe(2); // the series and its legend swatch
  });

  test("refuses x ≤ 0 on the log axis, non-finite values, and a right series without an axis title", () => {
    expect(() =>
      lineChart({ title: "t", xTitle: "x", yTitle: "y", series: [{ name: "a", points: [{ x: 0, y: 1 }] }], caption }),
    ).toThrow("log-2");
    expect(() =>
      lineChart({
        title: "t",
        xTitle: "x",
        yTitle: "y",
        series: [
          {
            name: "a",
            points: [
              { x: 1, y: Number.NaN },
              { x: 2, y: 1 },
            ],
          },
        ],
        caption,
      }),
    ).toThrow("not finite");
    expect(() =>
      lineChart({
        title: "t",
        xTitle: "x",
        yTitle: "y",
        series: [{ name: "a", axis: "right", points: [{ x: 1, y: 1 }] }],
        caption,
      }),
    ).toThrow("y2Title");
  });
});

describe("stackedBars", () => {
  test("is valid XML with a legend entry per family and finite coordinates", () => {
    const svg = breakdown();
    expect(legendNames(svg)).toEqual(["linear", "attention", "idle"]);
    for (const v of numericAttributes(svg)) expect(Number.isFinite(Number(v))).toBe(true);
    expect(svg).toContain(">eager</text>");
    expect(svg).toContain(">5.2</text>"); // the eager total
  });

  test("refuses negative segments and no bars", () => {
    expect(() =>
      stackedBars({ title: "t", yTitle: "y", bars: [{ label: "a", segments: [{ key: "k", value: -1 }] }], caption }),
    ).toThrow("value -1");
    expect(() => stackedBars({ title: "t", yTitle: "y", bars: [], caption })).toThrow("no bars");
  });
});

describe("helpers", () => {
  test("escapeXml escapes the five XML characters", () => {
    expect(escapeXml(`a<b>&"c'`)).toBe("a&lt;b&gt;&amp;&quot;c&apos;");
  });

  test("niceTicks steps by 1, 2 or 5 × 10^k up to the first tick at or above the maximum", () => {
    expect(niceTicks(5.2)).toEqual([0, 2, 4, 6]);
    expect(niceTicks(417)).toEqual([0, 100, 200, 300, 400, 500]);
    expect(niceTicks(1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0)).toEqual(niceTicks(1));
  });
});
