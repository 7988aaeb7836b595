// Chrome trace-event JSON (trace.json) for Perfetto / chrome://tracing: a typed builder, a validator of
// what Perfetto needs, and the profile's trace (per mode: a host track and a device track).
// ts and dur are microseconds relative to the run's start.
import type { HostInterval, OpInterval } from "../backends/instrument.ts";
import { stepSplit } from "../profile/aggregate.ts";
import type { DeviceDescription, StepTrace, StudyMode } from "../profile/types.ts";

type Scalar = string | number | boolean;
type ArgValue = Scalar | Scalar[] | null;

export type MetadataEvent =
  | { ph: "M"; name: "process_name" | "thread_name"; pid: number; tid: number; args: { name: string } }
  | {
      ph: "M";
      name: "process_sort_index" | "thread_sort_index";
      pid: number;
      tid: number;
      args: { sort_index: number };
    };

export interface CompleteEvent {
  ph: "X";
  name: string;
  cat: string;
  pid: number;
  tid: number;
  ts: number;
  dur: number;
  args?: Record<string, ArgValue>;
}

export interface FlowEvent {
  ph: "s" | "f";
  name: string;
  cat: string;
  id: number;
  pid: number;
  tid: number;
  ts: number;
  /** "e": bind the flow's end to the enclosing slice (on "f") */
  bp?: "e";
}

export interface CounterEvent {
  ph: "C";
  name: string;
  pid: number;
  tid: number;
  ts: number;
  args: Record<string, number>;
}

export type TraceEvent = MetadataEvent | CompleteEvent | FlowEvent | CounterEvent;

export interface ChromeTrace {
  traceEvents: TraceEvent[];
  displayTimeUnit: "ms";
  otherData: Record<string, Scalar>;
}

export interface TrackPoint {
  pid: number;
  tid: number;
  ts: number;
}

const metadataFirst = (e: TraceEvent) => (e.ph === "M" ? 0 : 1);
const startOf = (e: TraceEvent) => (e.ph === "M" ? 0 : e.ts);

/** Collects events; build() returns them metadata first, then by time (stable for equal times). */
export class TraceBuilder {
  private readonly events: TraceEvent[] = [];

  process(pid: number, name: string, sortIndex: number): this {
    this.events.push({ ph: "M", name: "process_name", pid, tid: 0, args: { name } });
    this.events.push({ ph: "M", name: "process_sort_index", pid, tid: 0, args: { sort_index: sortIndex } });
    return this;
  }

  thread(pid: number, tid: number, name: string, sortIndex: number): this {
    this.events.push({ ph: "M", name: "thread_name", pid, tid, args: { name } });
    this.events.push({ ph: "M", name: "thread_sort_index", pid, tid, args: { sort_index: sortIndex } });
    return this;
  }

  slice(event: Omit<CompleteEvent, "ph">): this {
    this.events.push({ ph: "X", ...event });
    return this;
  }

  /** An arrow from the slice enclosing `from` to the slice enclosing `to`. */
  flow(id: number, name: string, cat: string, from: TrackPoint, to: TrackPoint): this {
    this.events.push({ ph: "s", name, cat, id, ...from });
    this.events.push({ ph: "f", name, cat, id, bp: "e", ...to });
    return this;
  }

  counter(pid: number, name: string, ts: number, values: Record<string, number>): this {
    this.events.push({ ph: "C", name, pid, tid: 0, ts, args: values });
    return this;
  }

  build(otherData: Record<string, Scalar>): ChromeTrace {
    const traceEvents = this.events
      .map((e, order) => ({ e, order }))
      .sort((a, b) => metadataFirst(a.e) - metadataFirst(b.e) || startOf(a.e) - startOf(b.e) || a.order - b.order)
      .map(({ e }) => e);
    return { traceEvents, displayTimeUnit: "ms", otherData };
  }
}

// ---- validation -------------------------------------------------------------------------------

/** Tolerance for comparing µs timestamps (1 ns). */
const EPS_US = 1e-3;
/** A ts beyond this (≈ 28 hours) is an absolute clock, not relative to the run's start. */
const MAX_RELATIVE_TS_US = 1e11;
const METADATA_NAMES = new Set(["process_name", "thread_name", "process_sort_index", "thread_sort_index"]);
const PHASES = new Set(["M", "X", "s", "f", "C"]);

type Raw = Record<string, unknown>;
const isObject = (x: unknown): x is Raw => typeof x === "object" && x !== null && !Array.isArray(x);
const isNumber = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);
const trackKey = (e: Raw) => `${String(e.pid)}/${String(e.tid)}`;

function fieldProblems(e: Raw, where: string): string[] {
  const problems: string[] = [];
  if (typeof e.ph !== "string" || !PHASES.has(e.ph)) return [`${where}: unknown phase ${JSON.stringify(e.ph)}`];
  if (typeof e.name !== "string" || e.name === "") problems.push(`${where}: missing name`);
  if (!isNumber(e.pid)) problems.push(`${where}: pid must be a number`);
  if (e.ph !== "M" && e.ph !== "C" && !isNumber(e.tid)) problems.push(`${where}: tid must be a number`);
  if (e.ph === "M") return [...problems, ...metadataProblems(e, where)];
  if (!isNumber(e.ts) || e.ts < 0) problems.push(`${where}: ts must be a number ≥ 0, got ${JSON.stringify(e.ts)}`);
  else if (e.ts > MAX_RELATIVE_TS_US)
    problems.push(`${where}: ts ${e.ts} looks absolute; write it relative to the run's start`);
  if (e.ph === "X" && (!isNumber(e.dur) || e.dur < 0))
    problems.push(`${where}: dur must be a number ≥ 0, got ${JSON.stringify(e.dur)}`);
  if (e.ph === "X" && typeof e.cat !== "string") problems.push(`${where}: missing cat`);
  if ((e.ph === "s" || e.ph === "f") && e.id === undefined) problems.push(`${where}: flow event without id`);
  if (e.ph === "f" && e.bp !== "e") problems.push(`${where}: flow end should bind to its enclosing slice (bp: "e")`);
  if (e.ph === "C" && !(isObject(e.args) && Object.values(e.args).every(isNumber))) {
    problems.push(`${where}: counter args must be numbers`);
  }
  return problems;
}

function metadataProblems(e: Raw, where: string): string[] {
  if (typeof e.name !== "string" || !METADATA_NAMES.has(e.name))
    return [`${where}: unknown metadata ${JSON.stringify(e.name)}`];
  if (!isObject(e.args)) return [`${where}: metadata without args`];
  if (e.name.endsWith("_name") && (typeof e.args.name !== "string" || e.args.name === ""))
    return [`${where}: ${e.name} needs args.name`];
  if (e.name.endsWith("_sort_index") && !isNumber(e.args.sort_index))
    return [`${where}: ${e.name} needs a numeric args.sort_index`];
  if (e.name === "thread_name" && !isNumber(e.tid)) return [`${where}: thread_name needs a tid`];
  return [];
}

interface Slice {
  ts: number;
  end: number;
  name: string;
}

/** Slices on one track must nest: a slice that starts inside another must end inside it. */
function nestingProblems(slices: Slice[], track: string): string[] {
  const sorted = [...slices].sort((a, b) => a.ts - b.ts || b.end - a.end);
  const open: Slice[] = [];
  const problems: string[] = [];
  for (const s of sorted) {
    while (open.length > 0 && open[open.length - 1]!.end <= s.ts + EPS_US) open.pop();
    const parent = open[open.length - 1];
    if (parent && s.end > parent.end + EPS_US) {
      problems.push(
        `track ${track}: "${s.name}" [${s.ts}, ${s.end}] partly overlaps "${parent.name}" [${parent.ts}, ${parent.end}]`,
      );
      continue;
    }
    open.push(s);
  }
  return problems;
}

/** A track's slices by start, with the running maximum of their ends: "is ts inside a slice?" in log time. */
interface TrackIndex {
  starts: number[];
  maxEndSoFar: number[];
}

function indexTrack(slices: Slice[]): TrackIndex {
  const sorted = [...slices].sort((a, b) => a.ts - b.ts);
  let maxEnd = Number.NEGATIVE_INFINITY;
  return {
    starts: sorted.map((s) => s.ts),
    maxEndSoFar: sorted.map((s) => (maxEnd = Math.max(maxEnd, s.end))),
  };
}

function enclosed(track: TrackIndex | undefined, ts: number): boolean {
  if (!track) return false;
  let lo = 0;
  let hi = track.starts.length; // first start > ts + EPS
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (track.starts[mid]! <= ts + EPS_US) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && track.maxEndSoFar[lo - 1]! >= ts - EPS_US;
}

function flowProblems(events: Raw[], slicesByTrack: Map<string, Slice[]>): string[] {
  const tracks = new Map([...slicesByTrack].map(([key, slices]) => [key, indexTrack(slices)]));
  const flows = new Map<string, { s: Raw[]; f: Raw[] }>();
  for (const e of events.filter((x) => x.ph === "s" || x.ph === "f")) {
    const key = `${String(e.cat)}:${String(e.id)}`;
    const entry = flows.get(key) ?? { s: [], f: [] };
    (e.ph === "s" ? entry.s : entry.f).push(e);
    flows.set(key, entry);
  }
  const problems: string[] = [];
  for (const [key, { s, f }] of flows) {
    if (s.length !== 1 || f.length !== 1) {
      problems.push(`flow ${key}: ${s.length} start(s) and ${f.length} end(s); each id needs exactly one of each`);
      continue;
    }
    const [start, end] = [s[0]!, f[0]!];
    if (isNumber(start.ts) && isNumber(end.ts) && end.ts + EPS_US < start.ts)
      problems.push(`flow ${key}: ends before it starts`);
    if (!enclosed(tracks.get(trackKey(start)), Number(start.ts)))
      problems.push(`flow ${key}: start is inside no slice of its track`);
    if (!enclosed(tracks.get(trackKey(end)), Number(end.ts)))
      problems.push(`flow ${key}: end is inside no slice of its track`);
  }
  return problems;
}

function namingProblems(events: Raw[]): string[] {
  const named = new Set(events.filter((e) => e.ph === "M" && e.name === "process_name").map((e) => String(e.pid)));
  const namedThreads = new Set(events.filter((e) => e.ph === "M" && e.name === "thread_name").map(trackKey));
  const problems = new Set<string>();
  for (const e of events.filter((x) => x.ph !== "M")) {
    if (!named.has(String(e.pid))) problems.add(`process ${String(e.pid)} has no process_name`);
    if (e.ph === "X" && !namedThreads.has(trackKey(e))) problems.add(`track ${trackKey(e)} has no thread_name`);
  }
  return [...problems];
}

/** What Perfetto needs of a trace; returns the problems found (empty when the trace is sound). */
export function validateTrace(obj: unknown): string[] {
  if (!isObject(obj) || !Array.isArray(obj.traceEvents)) return ["not an object with a traceEvents array"];
  const events: Raw[] = [];
  const problems: string[] = [];
  for (const [i, e] of (obj.traceEvents as unknown[]).entries()) {
    if (!isObject(e)) {
      problems.push(`event ${i}: not an object`);
      continue;
    }
    const found = fieldProblems(e, `event ${i} (${String(e.ph)} "${String(e.name)}")`);
    problems.push(...found);
    if (found.length === 0) events.push(e);
  }
  const slicesByTrack = new Map<string, Slice[]>();
  for (const e of events.filter((x) => x.ph === "X")) {
    const list = slicesByTrack.get(trackKey(e)) ?? [];
    list.push({ ts: Number(e.ts), end: Number(e.ts) + Number(e.dur), name: String(e.name) });
    slicesByTrack.set(trackKey(e), list);
  }
  for (const [track, slices] of slicesByTrack) problems.push(...nestingProblems(slices, track));
  problems.push(...flowProblems(events, slicesByTrack), ...namingProblems(events));
  return problems;
}

// ---- the profile's trace ----------------------------------------------------------------------

export interface TraceMeta {
  backend: DeviceDescription["backend"];
  /** run metadata for otherData: command, date, machine, device, tool version */
  run: Record<string, Scalar>;
}

const HOST_TID = 1;
const DEVICE_TID = 2;

function opArgs(op: OpInterval, step: StepTrace): Record<string, ArgValue> {
  const args: Record<string, ArgValue> = {
    mode: step.mode,
    context: step.context,
    layer: op.layer,
    op: op.family,
    label: op.label,
  };
  if (op.grid) args.grid = op.grid;
  if (op.block) args.block = op.block;
  if (op.registers !== undefined) args["registers per thread"] = op.registers;
  if (op.shared_bytes !== undefined) args["shared memory"] = op.shared_bytes;
  if (op.correlation !== undefined) args.correlation = op.correlation;
  return args;
}

function hostSlice(h: HostInterval, backend: TraceMeta["backend"]) {
  const cat = h.kind === "launch" && backend === "cuda" ? "cuda_runtime" : "cpu_op";
  const args: Record<string, ArgValue> = h.correlation !== undefined ? { correlation: h.correlation } : {};
  return { name: h.name, cat, ts: h.start_us, dur: h.end_us - h.start_us, args };
}

/** One flow per launch call: to the first op carrying its correlation id (a graph launch runs many). */
function launchFlows(step: StepTrace): { launch: HostInterval; op: OpInterval }[] {
  const launches = new Map(
    step.host.filter((h) => h.kind === "launch" && h.correlation !== undefined).map((h) => [h.correlation, h]),
  );
  const linked = new Set<number>();
  const flows: { launch: HostInterval; op: OpInterval }[] = [];
  for (const op of [...step.ops].sort((a, b) => a.start_us - b.start_us)) {
    const launch = op.correlation !== undefined ? launches.get(op.correlation) : undefined;
    if (!launch || linked.has(op.correlation!)) continue;
    linked.add(op.correlation!);
    flows.push({ launch, op });
  }
  return flows;
}

/**
 * Device lanes for one mode's ops, in start order: each op on the first lane whose last op has ended, so ops that
 * overlap (graph-pdl: a kernel starts while its predecessor runs) sit on lanes of their own instead of partly
 * overlapping on one track, which Perfetto does not draw. Lane 0 is the device track itself.
 */
export function deviceLanes(ops: readonly OpInterval[]): Map<OpInterval, number> {
  const laneEnds: number[] = [];
  const lanes = new Map<OpInterval, number>();
  for (const op of [...ops].sort((a, b) => a.start_us - b.start_us || a.index - b.index)) {
    let lane = laneEnds.findIndex((end) => end <= op.start_us + EPS_US);
    if (lane < 0) lane = laneEnds.push(op.end_us) - 1;
    laneEnds[lane] = op.end_us;
    lanes.set(op, lane);
  }
  return lanes;
}

/**
 * The profile's trace: one process per mode (in order of appearance), each with a host track (step
 * issue, launch calls nested inside) and a device track (kernels or native ops, with their launch
 * shape in args; kernels that overlap the one before them on lanes below it), launch → kernel arrows, and a
 * per-step counter of busy / idle device time.
 * Flow ids are numbered here (correlation ids stay in args), so they are unique across modes.
 */
export function buildProfileTrace(steps: readonly StepTrace[], meta: TraceMeta): ChromeTrace {
  const b = new TraceBuilder();
  const modes: StudyMode[] = [...new Set(steps.map((s) => s.mode))];
  const pidOf = (mode: StudyMode) => modes.indexOf(mode) + 1;
  const deviceTrack = meta.backend === "cuda" ? "GPU stream" : "CPU native ops";
  const laneOf = new Map<OpInterval, number>();
  modes.forEach((mode, i) => {
    const lanes = deviceLanes(steps.filter((s) => s.mode === mode).flatMap((s) => s.ops));
    for (const [op, lane] of lanes) laneOf.set(op, lane);
    b.process(pidOf(mode), `${mode} (${meta.backend})`, i);
    b.thread(
      pidOf(mode),
      HOST_TID,
      meta.backend === "cuda" ? "host: step issue + launches" : "host: dispatch between ops",
      0,
    );
    const laneCount = 1 + Math.max(0, ...lanes.values());
    for (let lane = 0; lane < laneCount; lane++) {
      b.thread(
        pidOf(mode),
        DEVICE_TID + lane,
        lane === 0 ? deviceTrack : `${deviceTrack}: overlapping the kernel before (${lane + 1})`,
        1 + lane,
      );
    }
  });
  let flowId = 1;
  const opCat = meta.backend === "cuda" ? "kernel" : "cpu_op";
  for (const step of steps) {
    const pid = pidOf(step.mode);
    const tidOf = (op: OpInterval) => DEVICE_TID + (laneOf.get(op) ?? 0);
    for (const h of step.host) b.slice({ pid, tid: HOST_TID, ...hostSlice(h, meta.backend) });
    for (const op of step.ops) {
      b.slice({
        pid,
        tid: tidOf(op),
        name: op.name,
        cat: opCat,
        ts: op.start_us,
        dur: op.end_us - op.start_us,
        args: opArgs(op, step),
      });
    }
    for (const { launch, op } of launchFlows(step)) {
      b.flow(
        flowId++,
        "ac2g",
        "ac2g",
        { pid, tid: HOST_TID, ts: launch.start_us },
        { pid, tid: tidOf(op), ts: op.start_us },
      );
    }
    const split = stepSplit(step);
    const stepStart = Math.min(...step.host.map((h) => h.start_us), ...step.ops.map((o) => o.start_us));
    b.counter(pid, "device time per step (ms)", stepStart, { busy: split.busy_ms, idle: split.idle_ms });
  }
  return b.build(meta.run);
}
