// Hand-written SVG charts (no DOM, nothing to load): lines against a log-2 x axis (context, prefix),
// with vertical markers, and stacked bars. Every text is escaped; every coordinate is checked finite.

export interface Point {
  x: number;
  y: number;
}

export interface LineSeries {
  name: string;
  points: Point[];
  /** "right": drawn dashed against the second y axis */
  axis?: "left" | "right";
  /** drawn dotted (another subject beside the main ones, e.g. a peer) */
  dotted?: boolean;
}

/** A vertical line at one x (e.g. where a variant's cache read equals its weights' read), in a series' colour. */
export interface XMarker {
  x: number;
  label: string;
  /** index of the series whose colour it takes */
  series: number;
  /** dotted: a figure from a formula; solid: a measured one */
  dotted?: boolean;
}

export interface LineChartSpec {
  title: string;
  xTitle: string;
  yTitle: string;
  /** title of the second y axis, required when a series uses it */
  y2Title?: string;
  /** the left y axis in decades (log 10): a flat floor and a growing cost both stay readable */
  yLog?: boolean;
  series: LineSeries[];
  /** vertical lines across the plot; the x axis reaches each of them */
  markers?: XMarker[];
  /** legend entries for the markers' two styles, e.g. "crossover measured" and "crossover by the bytes" */
  markerLegend?: { solid: string; dotted: string };
  /** where the numbers come from: machine, device, date */
  caption: string;
}

export interface BarSegment {
  key: string;
  value: number;
}

export interface StackedBarsSpec {
  title: string;
  /** what the bars' labels are, under them */
  xTitle?: string;
  yTitle: string;
  bars: { label: string; segments: BarSegment[] }[];
  caption: string;
}

const WIDTH = 920;
const HEIGHT = 500;
const PLOT = { left: 80, top: 50, right: 640, bottom: 400 };
const LEGEND_X = 725;
const FONT = `font-family="Helvetica, Arial, sans-serif"`;
/** Tableau 10: distinct, readable on white. */
const PALETTE = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#76b7b2",
  "#59a14f",
  "#edc948",
  "#b07aa1",
  "#ff9da7",
  "#9c755f",
  "#bab0ac",
];

const colour = (i: number) => PALETTE[i % PALETTE.length]!;

export function escapeXml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&apos;");
}

function coord(v: number): string {
  if (!Number.isFinite(v)) throw new RangeError(`svg: coordinate ${v} is not finite`);
  return v.toFixed(1);
}

/** A tick label without float noise or trailing zeros: 0.25, 2, 1000. */
function tickLabel(v: number): string {
  return Number.parseFloat(v.toPrecision(6)).toString();
}

/** Ticks 0, step, 2 step, … up to the first ≥ max, with step 1, 2 or 5 × 10^k (about five of them). */
export function niceTicks(max: number): number[] {
  const top = max > 0 ? max : 1;
  const raw = top / 5;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw)!;
  const count = Math.ceil(top / step - 1e-9);
  return Array.from({ length: count + 1 }, (_, i) => Number((i * step).toPrecision(12)));
}

function text(x: number, y: number, content: string, attrs = ""): string {
  return `<text x="${coord(x)}" y="${coord(y)}" ${FONT} ${attrs}>${escapeXml(content)}</text>`;
}

/** Characters of the 11-px caption that fit between the plot's left edge and the chart's. */
const CAPTION_CHARS = 140;

/** The caption in lines that fit, broken after its " · " separators (a part longer than a line stays whole). */
export function captionLines(caption: string): string[] {
  const lines: string[] = [];
  for (const part of caption.split(" · ")) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + 3 + part.length <= CAPTION_CHARS)
      lines[lines.length - 1] = `${last} · ${part}`;
    else lines.push(part);
  }
  return lines;
}

function svgDocument(title: string, body: string[], caption: string): string {
  const lines = captionLines(caption);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    text(WIDTH / 2, 28, title, `font-size="17" font-weight="bold" text-anchor="middle"`),
    ...body,
    ...lines.map((line, i) =>
      text(PLOT.left, HEIGHT - 14 - (lines.length - 1 - i) * 14, line, `font-size="11" fill="#555555"`),
    ),
    `</svg>`,
    "",
  ].join("\n");
}

function legend(entries: { name: string; colour: string; dash?: string; swatch: "line" | "box" }[]): string[] {
  return entries.flatMap((e, i) => {
    const y = PLOT.top + 10 + i * 22;
    const mark =
      e.swatch === "box"
        ? `<rect x="${LEGEND_X}" y="${coord(y - 9)}" width="18" height="12" fill="${e.colour}"/>`
        : `<line x1="${LEGEND_X}" y1="${coord(y - 4)}" x2="${LEGEND_X + 18}" y2="${coord(y - 4)}" stroke="${e.colour}" stroke-width="2.5"${e.dash ? ` stroke-dasharray="${e.dash}"` : ""}/>`;
    return [`<g class="legend-entry">`, mark, text(LEGEND_X + 26, y, e.name, `font-size="13"`), `</g>`];
  });
}

interface LinearScale {
  ticks: number[];
  toY: (v: number) => number;
}

function linearScale(max: number): LinearScale {
  const ticks = niceTicks(max);
  const top = ticks[ticks.length - 1]!;
  return { ticks, toY: (v) => PLOT.bottom - (v / top) * (PLOT.bottom - PLOT.top) };
}

/** Decades from the one below the smallest value to the one above the largest; values must be positive. */
function logScale(values: number[]): LinearScale {
  const bad = values.find((v) => !(v > 0) || !Number.isFinite(v));
  if (bad !== undefined) throw new RangeError(`lineChart: y = ${bad} cannot go on a log axis`);
  const lo = Math.floor(Math.log10(Math.min(...values)));
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(...values))));
  const ticks = Array.from({ length: hi - lo + 1 }, (_, i) => Number((10 ** (lo + i)).toPrecision(12)));
  return { ticks, toY: (v) => PLOT.bottom - ((Math.log10(v) - lo) / (hi - lo)) * (PLOT.bottom - PLOT.top) };
}

function yAxis(scale: LinearScale, title: string, side: "left" | "right"): string[] {
  const x = side === "left" ? PLOT.left : PLOT.right;
  const tickX = side === "left" ? x - 6 : x + 6;
  const anchor = side === "left" ? "end" : "start";
  const titleX = side === "left" ? 22 : PLOT.right + 56;
  const lines = scale.ticks.flatMap((t) => {
    const y = scale.toY(t);
    const grid =
      side === "left"
        ? `<line x1="${PLOT.left}" y1="${coord(y)}" x2="${PLOT.right}" y2="${coord(y)}" stroke="#e5e5e5"/>`
        : "";
    return [grid, text(tickX, y + 4, tickLabel(t), `font-size="11" text-anchor="${anchor}"`)].filter(Boolean);
  });
  const mid = (PLOT.top + PLOT.bottom) / 2;
  return [
    ...lines,
    `<line x1="${x}" y1="${PLOT.top}" x2="${x}" y2="${PLOT.bottom}" stroke="#333333"/>`,
    text(titleX, mid, title, `font-size="13" text-anchor="middle" transform="rotate(-90 ${titleX} ${mid})"`),
  ];
}

function log2Domain(xs: number[]): { lo: number; hi: number } {
  const bad = xs.find((x) => !(x > 0) || !Number.isFinite(x));
  if (bad !== undefined) throw new RangeError(`lineChart: x = ${bad} cannot go on a log-2 axis`);
  const lo = Math.floor(Math.log2(Math.min(...xs)));
  const hi = Math.ceil(Math.log2(Math.max(...xs)));
  return hi > lo ? { lo, hi } : { lo: lo - 1, hi: hi + 1 };
}

const MARKER_GREY = "#666666";

/** Each marker a vertical line with its label beside its top, one row per marker in order of x so no two labels overlap. */
function markerLines(markers: XMarker[], toX: (x: number) => number): string[] {
  return [...markers]
    .sort((a, b) => a.x - b.x)
    .flatMap((m, row) => {
      const x = toX(m.x);
      const stroke = colour(m.series);
      return [
        `<g class="marker">`,
        `<line x1="${coord(x)}" y1="${PLOT.top}" x2="${coord(x)}" y2="${PLOT.bottom}" stroke="${stroke}" stroke-width="1.5"${m.dotted ? ` stroke-dasharray="2 3"` : ""}/>`,
        text(x + 3, PLOT.top + 10 + row * 12, m.label, `font-size="10" fill="${stroke}"`),
        `</g>`,
      ];
    });
}

/** Lines of y against x, x on a log-2 axis; series on the "right" axis are dashed against a second y axis. */
export function lineChart(spec: LineChartSpec): string {
  const points = spec.series.flatMap((s) => s.points);
  if (points.length === 0) throw new RangeError("lineChart: no points");
  const right = spec.series.filter((s) => s.axis === "right");
  if (right.length > 0 && spec.y2Title === undefined)
    throw new RangeError("lineChart: a series uses the second axis but y2Title is missing");
  const markers = spec.markers ?? [];
  const stray = markers.find((m) => !Number.isInteger(m.series) || m.series < 0 || m.series >= spec.series.length);
  if (stray) throw new RangeError(`lineChart: marker ${stray.label} names series ${stray.series}, which is not drawn`);
  const { lo, hi } = log2Domain([...points, ...markers].map((p) => p.x));
  const toX = (x: number) => PLOT.left + ((Math.log2(x) - lo) / (hi - lo)) * (PLOT.right - PLOT.left);
  const maxOf = (series: LineSeries[]) => Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.y)));
  const leftSeries = spec.series.filter((s) => s.axis !== "right");
  const left = spec.yLog
    ? logScale(leftSeries.flatMap((s) => s.points.map((p) => p.y)))
    : linearScale(maxOf(leftSeries));
  const rightScale = linearScale(maxOf(right));

  const xTicks = Array.from({ length: hi - lo + 1 }, (_, i) => 2 ** (lo + i)).flatMap((t) => [
    `<line x1="${coord(toX(t))}" y1="${PLOT.bottom}" x2="${coord(toX(t))}" y2="${PLOT.bottom + 5}" stroke="#333333"/>`,
    text(toX(t), PLOT.bottom + 19, tickLabel(t), `font-size="11" text-anchor="middle"`),
  ]);
  const lines = spec.series.flatMap((s, i) => {
    const scale = s.axis === "right" ? rightScale : left;
    const xy = [...s.points].sort((a, b) => a.x - b.x).map((p) => ({ x: coord(toX(p.x)), y: coord(scale.toY(p.y)) }));
    const dash = s.axis === "right" ? ` stroke-dasharray="6 4"` : s.dotted ? ` stroke-dasharray="2 3"` : "";
    return [
      `<g class="series">`,
      `<polyline points="${xy.map((p) => `${p.x},${p.y}`).join(" ")}" fill="none" stroke="${colour(i)}" stroke-width="2.5"${dash}/>`,
      ...xy.map((p) => `<circle cx="${p.x}" cy="${p.y}" r="3.5" fill="${colour(i)}"/>`),
      `</g>`,
    ];
  });
  const body = [
    ...yAxis(left, spec.yTitle, "left"),
    ...(right.length > 0 ? yAxis(rightScale, spec.y2Title!, "right") : []),
    `<line x1="${PLOT.left}" y1="${PLOT.bottom}" x2="${PLOT.right}" y2="${PLOT.bottom}" stroke="#333333"/>`,
    ...xTicks,
    text((PLOT.left + PLOT.right) / 2, PLOT.bottom + 44, spec.xTitle, `font-size="13" text-anchor="middle"`),
    ...lines,
    ...markerLines(markers, toX),
    ...legend([
      ...spec.series.map((s, i) => ({
        name: s.name,
        colour: colour(i),
        dash: s.axis === "right" ? "6 4" : s.dotted ? "2 3" : undefined,
        swatch: "line" as const,
      })),
      ...(markers.length > 0 && spec.markerLegend
        ? [
            { name: spec.markerLegend.solid, colour: MARKER_GREY, swatch: "line" as const },
            { name: spec.markerLegend.dotted, colour: MARKER_GREY, dash: "2 3", swatch: "line" as const },
          ]
        : []),
    ]),
  ];
  return svgDocument(spec.title, body, spec.caption);
}

/** One stacked bar per entry (e.g. per mode), one colour per segment key, the total above each bar. */
export function stackedBars(spec: StackedBarsSpec): string {
  if (spec.bars.length === 0) throw new RangeError("stackedBars: no bars");
  const keys = [...new Set(spec.bars.flatMap((b) => b.segments.map((s) => s.key)))];
  const negative = spec.bars.flatMap((b) => b.segments).find((s) => !(s.value >= 0));
  if (negative) throw new RangeError(`stackedBars: segment ${negative.key} has value ${negative.value}`);
  const totals = spec.bars.map((b) => b.segments.reduce((a, s) => a + s.value, 0));
  const scale = linearScale(Math.max(...totals));
  const slot = (PLOT.right - PLOT.left) / spec.bars.length;
  const barWidth = Math.min(90, slot * 0.6);
  const bars = spec.bars.flatMap((bar, i) => {
    const x = PLOT.left + slot * i + (slot - barWidth) / 2;
    let base = 0;
    const rects = bar.segments.map((s) => {
      const top = scale.toY(base + s.value);
      const height = scale.toY(base) - top;
      base += s.value;
      return `<rect x="${coord(x)}" y="${coord(top)}" width="${coord(barWidth)}" height="${coord(height)}" fill="${colour(keys.indexOf(s.key))}"><title>${escapeXml(`${bar.label}: ${s.key} ${tickLabel(s.value)}`)}</title></rect>`;
    });
    return [
      `<g class="bar">`,
      ...rects,
      text(
        x + barWidth / 2,
        scale.toY(totals[i]!) - 6,
        tickLabel(Number(totals[i]!.toPrecision(3))),
        `font-size="11" text-anchor="middle"`,
      ),
      text(x + barWidth / 2, PLOT.bottom + 19, bar.label, `font-size="12" text-anchor="middle"`),
      `</g>`,
    ];
  });
  const body = [
    ...yAxis(scale, spec.yTitle, "left"),
    `<line x1="${PLOT.left}" y1="${PLOT.bottom}" x2="${PLOT.right}" y2="${PLOT.bottom}" stroke="#333333"/>`,
    ...(spec.xTitle
      ? [text((PLOT.left + PLOT.right) / 2, PLOT.bottom + 44, spec.xTitle, `font-size="13" text-anchor="middle"`)]
      : []),
    ...bars,
    ...legend(keys.map((k, i) => ({ name: k, colour: colour(i), swatch: "box" as const }))),
  ];
  return svgDocument(spec.title, body, spec.caption);
}
