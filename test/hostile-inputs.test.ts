// A corpus of malformed and hostile inputs, generated here (test/helpers/model-files.ts), run through the CLIs
// as a user types them: truncations at every structural boundary of a safetensors file, hostile header
// lengths, duplicate keys, holes and overlaps, FIFOs and device files, non-finite and overflowing weights,
// names with control characters, the Llama layout and a sharded checkpoint's index, tokenizer files,
// unwritable and full outputs, and bad flags. Every case must end with exit ≠ 0, exactly one `error:` line,
// no stack trace, no raw control characters, and no partial output.
// The spawns run a few at a time; then each case is checked on its own.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { MAX_HEADER_BYTES } from "../src/model/safetensors.ts";
import { hasNvcc, hasPrebuilt } from "../src/native/build.ts";
import { probeDriver } from "../src/native/driver.ts";
import {
  checkpointTensors,
  dataOf,
  encode,
  encodeWithHeader,
  INDEX_FILE,
  microTensors,
  modelDir,
  shardedDir,
  withHeaderLength,
  type RawTensor,
} from "./helpers/model-files.ts";

const ROOT = join(import.meta.dir, "..");
const TINY = join(import.meta.dir, "fixtures/gpt2-tiny");
const CONCURRENT = 4;
const SPAWN_TIMEOUT_MS = 60_000;
/**
 * A profile case that gets as far as the read probe sweeps up to 4 GiB before it fails: 5 s alone, past 60 s on the
 * 2-core VM with a suite and two busy loops beside it (the overflowing weights' case, killed by the timeout).
 */
const PROFILE_SPAWN_TIMEOUT_MS = 300_000;
const isRoot = process.getuid?.() === 0;
/** Runs a command as an unprivileged user (root ignores permission bits); null where that is impossible. */
const asNobody: string[] | null = isRoot
  ? Bun.which("setpriv")
    ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    : null
  : [];

const base = mkdtempSync(join(tmpdir(), "hostile-"));
chmodSync(base, 0o755);

type Command = "generate" | "profile" | "build" | "verify" | "bench";

interface Case {
  name: string;
  command: Command;
  args: string[];
  message: RegExp;
  /** `bun run <script>` as typed (stderr must then be exactly one line), instead of `bun src/cli/<command>.ts` */
  viaBunRun?: boolean;
  /** stdout goes to this path (e.g. /dev/full) instead of a pipe */
  stdoutTo?: string;
  asNobody?: boolean;
  /** must not exist afterwards */
  absent?: string[];
  /** files that must still hold what they held (the user's) */
  unchanged?: Record<string, string>;
  /** directories that must hold no temporary (.partial-) entries afterwards */
  clean?: string[];
  /** results that must be there, whole, although the command failed after writing them (stdout failed) */
  kept?: string[];
  exitCode?: number;
  skip?: string;
}

interface Outcome {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

async function run(c: Case): Promise<Outcome> {
  const cli = c.viaBunRun ? ["run", c.command] : [join(ROOT, `src/cli/${c.command}.ts`)];
  const prefix = c.asNobody ? asNobody! : [];
  const stdoutFd = c.stdoutTo ? openSync(c.stdoutTo, "w") : null;
  try {
    const p = Bun.spawn([...prefix, process.execPath, ...cli, ...c.args], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: "1" },
      stdout: stdoutFd ?? "pipe",
      stderr: "pipe",
      timeout: c.command === "profile" ? PROFILE_SPAWN_TIMEOUT_MS : SPAWN_TIMEOUT_MS,
    });
    const [stdout, stderr] = await Promise.all([
      stdoutFd === null ? new Response(p.stdout as ReadableStream).text() : "",
      new Response(p.stderr).text(),
    ]);
    await p.exited;
    return { code: p.exitCode, signal: p.signalCode === null ? null : String(p.signalCode), stdout, stderr };
  } finally {
    if (stdoutFd !== null) closeSync(stdoutFd);
  }
}

/**
 * Runs the cases CONCURRENT at a time, the profile cases in a lane of their own, one after another: a profile that
 * gets as far as its read probe sweeps gigabytes on a thread team, and three at once beside two busy loops on the
 * 2-core VM took 63–64 s each (5 s alone), past SPAWN_TIMEOUT_MS.
 */
async function runPool(cases: Case[]): Promise<Map<string, Outcome>> {
  const out = new Map<string, Outcome>();
  const lane = async (queue: Case[]) => {
    for (let c = queue.shift(); c; c = queue.shift()) if (!c.skip) out.set(c.name, await run(c));
  };
  const profiles = cases.filter((c) => c.command === "profile");
  const others = cases.filter((c) => c.command !== "profile");
  await Promise.all([lane(profiles), ...Array.from({ length: CONCURRENT - 1 }, () => lane(others))]);
  return out;
}

// ---- the corpus ---------------------------------------------------------------------------------------

const cases: Case[] = [];
const add = (c: Case) => cases.push(c);
const gen = (name: string, args: string[], message: RegExp, extra: Partial<Case> = {}) =>
  add({
    name,
    command: "generate",
    args: [...args, "--backend", "cpu", "--prompt-ids", "1,2,3", "--max-new-tokens", "3"],
    message,
    ...extra,
  });
const withModel = (model: Uint8Array | null, config?: string | null) => ["--model", modelDir(base, { model, config })];

const good = encode(microTensors());
const tensors = microTensors();

// truncations at every structural boundary: inside the length, after it, inside and at the end of the
// header, at the start and one byte into every tensor's data, one byte short of the end
const cuts = new Set([
  0,
  1,
  4,
  7,
  8,
  9,
  8 + Math.floor(good.headerLen / 2),
  8 + good.headerLen - 1,
  8 + good.headerLen,
  good.bytes.length - 1,
]);
for (const at of good.fileOffsets.values()) cuts.add(at).add(at + 1);
for (const at of [...cuts].sort((a, b) => a - b)) {
  gen(
    `truncated at byte ${at} of ${good.bytes.length}`,
    withModel(good.bytes.subarray(0, at)),
    /shorter than the 8-byte header length|runs past the end of the file|not valid JSON|run past the end of the data section|truncated/,
  );
}

// hostile header lengths
const lengths: Array<[string, bigint, RegExp]> = [
  ["zero", 0n, /not valid JSON/],
  ["one", 1n, /not valid JSON/],
  ["one short of the header", BigInt(good.headerLen - 1), /not valid JSON/],
  ["one past the header", BigInt(good.headerLen + 1), /not valid JSON|no tensor|past the end/],
  ["past the end of the file", BigInt(good.bytes.length), /runs past the end of the file/],
  ["just above the 100 MiB cap", BigInt(MAX_HEADER_BYTES) + 1n, /above the 100 MiB cap/],
  ["2^63", 2n ** 63n, /above the 100 MiB cap/],
  ["2^64 - 1", 2n ** 64n - 1n, /above the 100 MiB cap/],
];
for (const [what, length, message] of lengths)
  gen(`header length ${what}`, withModel(withHeaderLength(good.bytes, length)), message);

// duplicate keys (JSON.parse keeps the last: the file is ambiguous)
const entry = (t: RawTensor, begin: number) =>
  `"${t.name}":{"dtype":"F32","shape":${JSON.stringify(t.shape)},"data_offsets":[${begin},${begin + t.values.byteLength}]}`;
const entries = (list: RawTensor[]) => {
  let at = 0;
  return list.map((t) => {
    const e = entry(t, at);
    at += t.values.byteLength;
    return e;
  });
};
const dupTop = `{${entries(tensors).join(",")},${entry(tensors[0]!, 0)}}`;
gen(
  "a tensor named twice in the header",
  withModel(encodeWithHeader(dupTop, dataOf(tensors)).bytes),
  /header has the key "wte\.weight" twice in one object/,
);
const dupNested = `{${entries(tensors).join(",").replace('"data_offsets":[0,', '"data_offsets":[4,8],"data_offsets":[0,')}}`;
gen(
  "data_offsets twice in one entry",
  withModel(encodeWithHeader(dupNested, dataOf(tensors)).bytes),
  /header has the key "data_offsets" twice/,
);
const dupMeta = `{"__metadata__":{"format":"pt","format":"np"},${entries(tensors).join(",")}}`;
gen(
  "a __metadata__ key twice",
  withModel(encodeWithHeader(dupMeta, dataOf(tensors)).bytes),
  /header has the key "format" twice/,
);

// holes and overlaps
const withTrailing = new Uint8Array(good.bytes.length + 4);
withTrailing.set(good.bytes);
gen("4 bytes after the last tensor", withModel(withTrailing), /at the end of the data section belong to no tensor/);
const gapData = dataOf(tensors);
gapData.splice(3, 0, new Uint8Array(4)); // 4 bytes between the 3rd and 4th tensors
const gapHeader = (() => {
  const list = entries(tensors.slice(0, 3));
  let at = tensors.slice(0, 3).reduce((n, t) => n + t.values.byteLength, 0) + 4;
  for (const t of tensors.slice(3)) {
    list.push(entry(t, at));
    at += t.values.byteLength;
  }
  return `{${list.join(",")}}`;
})();
gen(
  "4 bytes between two tensors",
  withModel(encodeWithHeader(gapHeader, gapData).bytes),
  /bytes \[\d+, \d+\) of the data section belong to no tensor \(a hole before h\.0\.ln_1\.bias/,
);
gen(
  "two tensors sharing bytes",
  withModel(
    encode(tensors, (h) => {
      h["h.0.ln_1.bias"]!.data_offsets = [...h["h.0.ln_1.weight"]!.data_offsets];
    }).bytes,
  ),
  /tensors h\.0\.ln_1\.(weight|bias) \[\d+, \d+\] and h\.0\.ln_1\.(weight|bias) \[\d+, \d+\] overlap/,
);

// FIFOs, devices, directories in the model's place
const special = (make: (path: string) => void, file: "model.safetensors" | "config.json") => {
  const dir = modelDir(base, {
    model: file === "model.safetensors" ? null : good.bytes,
    config: file === "config.json" ? null : undefined,
  });
  make(join(dir, file));
  return dir;
};
const fifo = (path: string) => {
  if (Bun.spawnSync(["mkfifo", path]).exitCode !== 0) throw new Error(`mkfifo ${path} failed`);
};
const zero = (path: string) => symlinkSync("/dev/zero", path);
const devNull = (path: string) => symlinkSync("/dev/null", path);
const dir = (path: string) => mkdirSync(path);
gen(
  "model.safetensors is a FIFO (must not block)",
  ["--model", special(fifo, "model.safetensors")],
  /model\.safetensors is a FIFO \(named pipe\), not a regular file/,
);
gen(
  "model.safetensors is /dev/zero",
  ["--model", special(zero, "model.safetensors")],
  /model\.safetensors is a character device, not a regular file/,
);
gen(
  "model.safetensors is /dev/null",
  ["--model", special(devNull, "model.safetensors")],
  /model\.safetensors is a character device/,
);
gen(
  "model.safetensors is a directory",
  ["--model", special(dir, "model.safetensors")],
  /model\.safetensors is a directory, not a regular file/,
);
gen(
  "config.json is a FIFO (must not block)",
  ["--model", special(fifo, "config.json")],
  /config\.json is a FIFO \(named pipe\), not a regular file/,
);
gen("config.json is /dev/zero", ["--model", special(zero, "config.json")], /config\.json is a character device/);
gen(
  "config.json is a directory (EISDIR)",
  ["--model", special(dir, "config.json")],
  /config\.json is a directory, not a regular file/,
);
const unreadable = (file: "model.safetensors" | "config.json") => {
  const d = modelDir(base, { model: good.bytes });
  chmodSync(join(d, file), 0o000);
  return d;
};
const nobodySkip = asNobody === null ? "running as root without setpriv: permission bits cannot be tested" : undefined;
gen(
  "config.json unreadable (EACCES)",
  ["--model", unreadable("config.json")],
  /config\.json: cannot open: permission denied \(EACCES\)/,
  { asNobody: true, skip: nobodySkip },
);
gen(
  "model.safetensors unreadable (EACCES)",
  ["--model", unreadable("model.safetensors")],
  /model\.safetensors: cannot open: permission denied \(EACCES\)/,
  { asNobody: true, skip: nobodySkip },
);
gen(
  "--model names a FIFO",
  [
    "--model",
    (() => {
      const p = join(base, "model-fifo");
      fifo(p);
      return p;
    })(),
  ],
  /--model takes a directory/,
);
gen("--model names /dev/zero", ["--model", "/dev/zero"], /--model takes a directory/);

// non-finite weights, rejected at load with the tensor named; overflowing finite ones, caught in the logits
const poisoned = (dtype: RawTensor["dtype"], value: number) => {
  const list = microTensors(dtype);
  list.find((t) => t.name === "h.0.mlp.c_fc.weight")!.values[5] = value;
  return encode(list).bytes;
};
gen(
  "a NaN weight (F32)",
  withModel(poisoned("F32", NaN)),
  /tensor h\.0\.mlp\.c_fc\.weight \(F32\) holds NaN at element 5 of 256; weights must be finite/,
);
gen(
  "a +Inf weight (F32)",
  withModel(poisoned("F32", Infinity)),
  /tensor h\.0\.mlp\.c_fc\.weight \(F32\) holds Infinity at element 5/,
);
gen("a -Inf weight (F32)", withModel(poisoned("F32", -Infinity)), /holds -Infinity at element 5/);
gen(
  "an F16 weight that widens to Inf",
  withModel(poisoned("F16", 1e6)),
  /tensor h\.0\.mlp\.c_fc\.weight \(F16\) holds Infinity at element 5/,
);
gen("a NaN weight (BF16)", withModel(poisoned("BF16", NaN)), /\(BF16\) holds NaN at element 5/);
const overflowing = (() => {
  const list = microTensors();
  list.find((t) => t.name === "h.0.attn.c_attn.bias")!.values.fill(3e38); // finite, but q·k overflows
  return encode(list).bytes;
})();
const overflowMessage =
  /the logits .* are not finite \(NaN for token id \d+\): the first op with a non-finite output is h0\.attn\.attend \(layer 0, op 5 of 15 in the step\)/;
const overflowDir = modelDir(base, { model: overflowing });
gen("weights of 3e38 that overflow, cached", ["--model", overflowDir], overflowMessage);
gen("weights of 3e38 that overflow, uncached", ["--model", overflowDir, "--cache", "off"], overflowMessage);
gen("weights of 3e38 that overflow, replayed natively", ["--model", overflowDir, "--mode", "replay"], overflowMessage);
const overflowOut = join(base, "overflow-profile");
// the profile's cached step runs the fused plan: 7 ops for the one layer, attention the third
const fusedOverflowMessage =
  /the logits .* are not finite \(NaN for token id \d+\): the first op with a non-finite output is h0\.attn\.attend \(layer 0, op 3 of 7 in the step\)/;
add({
  name: "profile of weights that overflow",
  command: "profile",
  message: fusedOverflowMessage,
  args: ["--backend", "cpu", "--model", overflowDir, "--contexts", "4", "--repeats", "1", "--out", overflowOut],
  absent: [overflowOut],
  clean: [base],
});

// the Llama family's layout (llama-tiny), single-file and sharded: the same rules, and the index file's own
const LLAMA = join(import.meta.dir, "fixtures/llama-tiny");
const llamaConfig = readFileSync(join(LLAMA, "config.json"), "utf8");
const llamaTensors = checkpointTensors(join(LLAMA, "model.safetensors"));
const llamaNames = llamaTensors.map((t) => t.name);
const llamaHalves = [llamaNames.slice(0, 10), llamaNames.slice(10)];
const withLlama = (model: Uint8Array, config = llamaConfig) => ["--model", modelDir(base, { model, config })];
const llamaGood = encode(llamaTensors);
const gateProj = "model.layers.0.mlp.gate_proj.weight";
const llamaCuts = [8 + llamaGood.headerLen, llamaGood.fileOffsets.get(gateProj)! + 1, llamaGood.bytes.length - 1];
for (const at of llamaCuts)
  gen(
    `a Llama checkpoint truncated at byte ${at} of ${llamaGood.bytes.length}`,
    withLlama(llamaGood.bytes.subarray(0, at)),
    /run past the end of the data section|runs past the end of the file|truncated/,
  );
const llamaPoisoned = (dtype: RawTensor["dtype"], value: number) => {
  const list = checkpointTensors(join(LLAMA, "model.safetensors"), dtype);
  list.find((t) => t.name === gateProj)!.values[5] = value;
  return encode(list).bytes;
};
gen(
  "a NaN weight in a Llama layout (BF16)",
  withLlama(llamaPoisoned("BF16", NaN)),
  /tensor model\.layers\.0\.mlp\.gate_proj\.weight \(BF16\) holds NaN at element 5 of \d+; weights must be finite/,
);
gen(
  "an F16 Llama weight that widens to Inf",
  withLlama(llamaPoisoned("F16", 1e6)),
  /tensor model\.layers\.0\.mlp\.gate_proj\.weight \(F16\) holds Infinity at element 5/,
);
gen(
  "a Llama tensor missing",
  withLlama(encode(llamaTensors.filter((t) => t.name !== gateProj)).bytes),
  /tensor model\.layers\.0\.mlp\.gate_proj\.weight is missing \(expected \[\d+, \d+\]\)/,
);
gen(
  "a Llama tensor of the wrong shape",
  withLlama(
    encode(llamaTensors, (h) => {
      h[gateProj]!.shape = [...h[gateProj]!.shape].reverse();
    }).bytes,
  ),
  /model\.layers\.0\.mlp\.gate_proj\.weight has shape \[\d+, \d+\], expected \[\d+, \d+\]/,
);
gen(
  "a Llama config with heads not divisible by its K/V heads",
  withLlama(llamaGood.bytes, JSON.stringify({ ...JSON.parse(llamaConfig), num_key_value_heads: 3 })),
  /num_attention_heads 4 is not divisible by num_key_value_heads 3/,
);
const sharded = (index?: (map: Record<string, string>) => string) =>
  shardedDir(base, join(LLAMA, "config.json"), llamaTensors, llamaHalves, index);
const weightMap = (edit: (map: Record<string, string>) => void) => (map: Record<string, string>) => {
  edit(map);
  return JSON.stringify({ weight_map: map });
};
gen(
  "an index naming a shard outside the folder",
  ["--model", sharded(weightMap((m) => (m[gateProj] = "../model-00001-of-00002.safetensors")))],
  /tensor model\.layers\.0\.mlp\.gate_proj\.weight names shard "\.\.\/model-00001-of-00002\.safetensors", not a file in/,
);
gen(
  "an index naming an absolute shard path",
  ["--model", sharded(weightMap((m) => (m[gateProj] = "/etc/passwd")))],
  /names shard "\/etc\/passwd", not a file in/,
);
gen(
  "an index naming a missing shard",
  ["--model", sharded(weightMap((m) => (m[gateProj] = "model-00003-of-00002.safetensors")))],
  /shard model-00003-of-00002\.safetensors \(of model\.layers\.0\.mlp\.gate_proj\.weight\) is missing/,
);
gen(
  "a tensor in two shards",
  [
    "--model",
    shardedDir(base, join(LLAMA, "config.json"), llamaTensors, [llamaNames.slice(0, 11), llamaNames.slice(10)]),
  ],
  /tensor \S+ is in two shards \(model-00001-of-00002\.safetensors and model-00002-of-00002\.safetensors\)/,
);
gen(
  "an index giving a tensor to a shard that does not hold it",
  ["--model", sharded(weightMap((m) => (m[llamaNames[0]!] = "model-00002-of-00002.safetensors")))],
  /tensor model\.\S+ is not in its shard model-00002-of-00002\.safetensors/,
);
gen(
  "an index that is not JSON",
  ["--model", sharded(() => "{ nope")],
  /model\.safetensors\.index\.json: not valid JSON/,
);
gen(
  "an index without a weight_map",
  ["--model", sharded(() => JSON.stringify({ metadata: {} }))],
  /expected an object with a "weight_map" object/,
);
const shardedSpecial = (make: (path: string) => void, file: string) => {
  const d = sharded();
  rmSync(join(d, file));
  make(join(d, file));
  return d;
};
gen(
  "the index is a FIFO (must not block)",
  ["--model", shardedSpecial(fifo, INDEX_FILE)],
  /model\.safetensors\.index\.json is a FIFO \(named pipe\), not a regular file/,
);
gen(
  "the index is /dev/zero",
  ["--model", shardedSpecial(zero, INDEX_FILE)],
  /model\.safetensors\.index\.json is a character device/,
);
gen(
  "a shard is a FIFO (must not block)",
  ["--model", shardedSpecial(fifo, "model-00002-of-00002.safetensors")],
  /model-00002-of-00002\.safetensors is a FIFO \(named pipe\), not a regular file/,
);
const tokenizerDir = (make: (path: string) => void) => {
  const d = modelDir(base, { model: llamaGood.bytes, config: llamaConfig });
  make(join(d, "tokenizer.json"));
  return d;
};
const promptCase = (name: string, dir: string, message: RegExp) =>
  add({
    name,
    command: "generate",
    args: ["--model", dir, "--backend", "cpu", "--prompt", "hello", "--max-new-tokens", "3"],
    message,
  });
promptCase(
  "a malformed tokenizer.json",
  tokenizerDir((p) => writeFileSync(p, '{"model": ')),
  /tokenizer\.json: not valid JSON/,
);
promptCase(
  "a tokenizer.json its library cannot read",
  tokenizerDir((p) => writeFileSync(p, '{"model": {}}')),
  /tokenizer\.json: not a tokenizer @huggingface\/tokenizers can read/,
);
promptCase("tokenizer.json is a FIFO (must not block)", tokenizerDir(fifo), /tokenizer\.json is a FIFO/);

// odd tensor names: every message stays one line, the name escaped
for (const [what, name, shown] of [
  ["a newline", "evil\nname", "evil\\nname"],
  ["a NUL", "nul\u0000byte", "nul\\u0000byte"],
  ["a right-to-left override", "h.0.\u202eevil", "h.0.\\u202eevil"],
  ["an escape sequence", "esc\u001b[31mred", "esc\\u001b[31mred"],
] as const) {
  const extra: RawTensor = { name, dtype: "F32", shape: [1], values: new Float32Array([0]) };
  gen(
    `an extra tensor whose name holds ${what}`,
    withModel(encode([...tensors, extra]).bytes),
    new RegExp(`unexpected tensors ${shown.replace(/[\\[.]/g, "\\$&")}`),
  );
}

// outputs that cannot be written: nothing partial is left
const outDir = join(base, "outputs");
mkdirSync(outDir);
chmodSync(outDir, 0o755);
const microDir = modelDir(base, { model: good.bytes });
const genOut = (name: string, args: string[], message: RegExp, extra: Partial<Case> = {}) =>
  gen(name, ["--model", microDir, ...args], message, { clean: [outDir], ...extra });
genOut(
  "--dump-logits /dev/full",
  ["--dump-logits", "/dev/full"],
  /cannot write \/dev\/full: no space left on device \(ENOSPC\)/,
);
genOut("--dump-logits names a directory", ["--dump-logits", outDir], /is a directory, not a file/);
const usersFile = join(outDir, "users-file.txt");
writeFileSync(usersFile, "mine");
genOut(
  "--dump-logits naming a file that exists, without --force: kept",
  ["--dump-logits", usersFile],
  /--dump-logits .*users-file\.txt exists: give --force to replace it, or another file/,
  { unchanged: { [usersFile]: "mine" } },
);
genOut(
  "--save-prefix naming a file that exists, without --force: kept",
  ["--save-prefix", usersFile],
  /--save-prefix .*users-file\.txt exists: give --force to replace it/,
  { unchanged: { [usersFile]: "mine" } },
);
genOut(
  "--save-prefix naming the file --prefix reads",
  ["--prefix", usersFile, "--save-prefix", usersFile, "--force"],
  /--save-prefix .*users-file\.txt is the file --prefix names: give another/,
  { unchanged: { [usersFile]: "mine" } },
);
genOut(
  "--dump-logits naming the file --save-prefix writes",
  ["--save-prefix", join(outDir, "p.prefix"), "--dump-logits", join(outDir, "p.prefix")],
  /--dump-logits .*p\.prefix is the file --save-prefix names/,
  { absent: [join(outDir, "p.prefix")] },
);
genOut("--force without a file to replace", ["--force"], /--force lets --save-prefix or --dump-logits replace a file/);
genOut(
  "--dump-logits in a missing directory",
  ["--dump-logits", join(outDir, "missing/l.f32")],
  /the directory .*missing does not exist/,
  { absent: [join(outDir, "missing")] },
);
const lockedDir = join(base, "locked");
mkdirSync(lockedDir);
chmodSync(lockedDir, 0o555);
genOut(
  "--dump-logits in a directory without write permission",
  ["--dump-logits", join(lockedDir, "l.f32")],
  /cannot be written: permission denied \(EACCES\)/,
  { asNobody: true, skip: nobodySkip, absent: [join(lockedDir, "l.f32")] },
);
genOut("stdout on a full disk (/dev/full)", ["--json"], /cannot write to stdout: no space left on device \(ENOSPC\)/, {
  stdoutTo: "/dev/full",
});

const prof = (name: string, args: string[], message: RegExp, extra: Partial<Case> = {}) =>
  add({
    name,
    command: "profile",
    args: [
      "--backend",
      "cpu",
      "--model",
      microDir,
      "--contexts",
      "4",
      "--repeats",
      "1",
      "--warmup",
      "0",
      "--traced-steps",
      "1",
      "--e2e-tokens",
      "2",
      ...args,
    ],
    message,
    clean: [outDir],
    ...extra,
  });
const traceIsDir = join(outDir, "trace-is-dir");
mkdirSync(join(traceIsDir, "trace.json"), { recursive: true });
prof(
  "--out holding only a directory named trace.json: not a run",
  ["--out", traceIsDir, "--force"],
  /is a directory holding other files \(1\), not a profile run/,
);
const earlierRun = join(outDir, "earlier-run");
mkdirSync(earlierRun);
writeFileSync(join(earlierRun, "summary.json"), "{}");
prof("--out holding an earlier run, without --force", ["--out", earlierRun], /already holds a profile run/);
const notARun = join(outDir, "not-a-run");
mkdirSync(notARun);
writeFileSync(join(notARun, "notes.txt"), "mine");
prof(
  "--out holding other files, even with --force",
  ["--out", notARun, "--force"],
  /holding other files \(1\), not a profile run/,
);
const runWithNotes = join(outDir, "run-with-notes");
mkdirSync(runWithNotes);
writeFileSync(join(runWithNotes, "summary.json"), "{}");
writeFileSync(join(runWithNotes, "notes.md"), "mine");
prof(
  "--out holding an earlier run and the user's notes, even with --force: both kept",
  ["--out", runWithNotes, "--force"],
  /holds a profile run and files it did not write \(1: notes\.md\), which replacing it would remove/,
  {
    unchanged: { [join(runWithNotes, "notes.md")]: "mine", [join(runWithNotes, "summary.json")]: "{}" },
    clean: [outDir],
  },
);
const linkedOut = join(outDir, "linked-out");
symlinkSync(join(outDir, "nowhere"), linkedOut);
prof("--out naming a symbolic link (here a dangling one)", ["--out", linkedOut], /is a symbolic link: give the folder/);
const runWithFolder = join(outDir, "run-with-folder");
mkdirSync(join(runWithFolder, "trace.json"), { recursive: true });
writeFileSync(join(runWithFolder, "summary.json"), "{}");
writeFileSync(join(runWithFolder, "trace.json", "notes.md"), "mine");
prof(
  "--out holding a run and a folder under an output's name, even with --force: both kept",
  ["--out", runWithFolder, "--force"],
  /holds a profile run and files it did not write \(1: trace\.json\)/,
  { unchanged: { [join(runWithFolder, "trace.json", "notes.md")]: "mine" }, clean: [outDir] },
);
prof("--force without --out", ["--force"], /--force replaces what an explicit --out holds/);
prof("--out naming a file", ["--out", join(TINY, "config.json")], /is a file, not a directory/);
prof("--out /dev/full", ["--out", "/dev/full"], /is a file, not a directory/);
prof(
  "--out in a directory without write permission",
  ["--out", join(lockedDir, "run")],
  /cannot be written: permission denied \(EACCES\)/,
  { asNobody: true, skip: nobodySkip, absent: [join(lockedDir, "run")], clean: [lockedDir] },
);
const newParents = join(outDir, "new/parents/run");
prof(
  "a run that fails leaves no parent folders it created",
  ["--out", newParents, "--mode", "graph"],
  /mode graph is not available on the cpu backend/,
  { absent: [join(outDir, "new")] },
);
const keptRun = join(outDir, "kept");
prof(
  "stdout on a full disk after the run: the results are kept whole",
  ["--out", keptRun, "--json"],
  /cannot write to stdout: no space left on device/,
  { stdoutTo: "/dev/full", kept: [keptRun] },
);

// a full disk: a 16 KiB tmpfs (root only)
const fullDisk = join(base, "full-disk");
mkdirSync(fullDisk);
const mounted = isRoot && Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", fullDisk]).exitCode === 0;
afterAll(() => {
  if (mounted) Bun.spawnSync(["umount", fullDisk]);
  rmSync(base, { recursive: true, force: true });
});
const mountSkip = mounted ? undefined : "needs root and CAP_SYS_ADMIN to mount a 16 KiB tmpfs as a full disk";
const mountCases: Case[] = [];
mountCases.push({
  name: "profile --out on a full disk",
  command: "profile",
  args: [
    "--backend",
    "cpu",
    "--model",
    microDir,
    "--contexts",
    "4",
    "--repeats",
    "1",
    "--warmup",
    "0",
    "--traced-steps",
    "1",
    "--e2e-tokens",
    "2",
    "--out",
    join(fullDisk, "run"),
  ],
  message: /cannot write the results to .*run: no space left on device \(ENOSPC\)/,
  absent: [join(fullDisk, "run")],
  clean: [fullDisk],
});
mountCases.push({
  name: "--dump-logits on a full disk",
  command: "generate",
  args: [
    "--model",
    TINY,
    "--backend",
    "cpu",
    "--prompt-ids",
    "1,2,3",
    "--max-new-tokens",
    "8",
    "--dump-logits",
    join(fullDisk, "l.f32"),
  ],
  message: /cannot write .*l\.f32 .*no space left on device \(ENOSPC\)/,
  absent: [join(fullDisk, "l.f32")],
  clean: [fullDisk],
});
for (const c of mountCases) add({ ...c, skip: mountSkip });

// flags: every switch of every command takes only true/false; valued flags are never empty
const flag = (command: Command, args: string[], message: RegExp, viaBunRun = false) =>
  add({
    name: `${viaBunRun ? "bun run " : ""}${command} ${args.map((a) => JSON.stringify(a)).join(" ")}`,
    command,
    args,
    message,
    viaBunRun,
  });
const switchMessage = (name: string) =>
  new RegExp(`--${name} is a switch: give it alone, as --no-${name}, or =true / =false`);
const emptyMessage = (name: string) => new RegExp(`--${name} is empty \\(an unset shell variable\\?\\)`);
for (const [command, switches] of [
  ["generate", ["json", "help", "version"]],
  ["profile", ["json", "kernels", "force", "help"]],
  ["build", ["quiet", "help"]],
  ["verify", ["help", "version"]],
] as const) {
  for (const s of switches) flag(command, [`--${s}=maybe`], switchMessage(s));
}
flag("generate", ["--json=1"], switchMessage("json"));
flag("profile", ["--kernels=no"], switchMessage("kernels"));
for (const [command, name] of [
  ["generate", "model"],
  ["generate", "prompt"],
  ["generate", "prompt-ids"],
  ["generate", "dump-logits"],
  ["generate", "max-new-tokens"],
  ["profile", "model"],
  ["profile", "out"],
  ["profile", "contexts"],
  ["profile", "repeats"],
  ["verify", "seed"],
] as const) {
  flag(command, [`--${name}`, ""], emptyMessage(name));
}
flag("generate", ["--model="], emptyMessage("model"));
flag("generate", ["--no-model"], /--model needs a value/);
flag("bench", ["cpu", "--steps="], emptyMessage("steps"));
flag("bench", ["cpu", "--help=maybe"], switchMessage("help"));
flag("build", ["nosuchtarget"], /targets "nosuchtarget" is not one of: cpu, emu, cuda, cupti/);
// through `bun run <script>` as typed: exactly one line on stderr
flag("generate", ["--json=maybe"], switchMessage("json"), true);
flag("generate", ["--model", ""], emptyMessage("model"), true);
flag("profile", ["--kernels=maybe"], switchMessage("kernels"), true);
flag("build", ["--quiet=maybe"], switchMessage("quiet"), true);
flag("bench", ["cpu", "--steps", ""], emptyMessage("steps"), true);
flag("generate", ["--model", "/nonexistent/model"], /model directory not found: \/nonexistent\/model/, true);
// number flags: a value that is a number, never the default in its place
flag("generate", ["--max-new-tokens"], /--max-new-tokens needs a value/, true);
flag("generate", ["--batch", "--json"], /--batch needs a value/);
flag("profile", ["--repeats", "--warmup", "1"], /--repeats needs a value/);
flag("bench", ["cpu", "--steps"], /--steps needs a value/);
flag("generate", ["--seed", "abc"], /--seed must be a number \(got "abc"\)/);
flag("generate", ["--maxNewTokens"], /--max-new-tokens needs a value/);
flag("generate", ["--seed", "0x10"], /--seed must be a number \(got "0x10"\)/);
flag("generate", ["--no-seed"], /--no-seed: --seed takes a number, it is not a switch/);
flag("verify", ["--seed", "abc"], /--seed must be a number \(got "abc"\)/, true);
flag("verify", ["--seed", "-1"], /--seed must be an integer in 0\.\.4294967295 \(got -1\)/);
flag("verify", ["--seed", "1.5"], /--seed must be an integer in 0\.\.4294967295 \(got 1\.5\)/);
// no GPU: --backend cuda is its one line, before any check prints anything
const driver = probeDriver();
add({
  name: "bun run verify --backend cuda without a GPU",
  command: "verify",
  args: ["--backend", "cuda"],
  message: /CUDA backend unavailable/,
  viaBunRun: true,
  skip:
    driver.ok && driver.devices.length > 0
      ? "a GPU is here"
      : hasNvcc() || hasPrebuilt("cuda")
        ? undefined
        : "no CUDA library (nvcc not found)",
});

// ---- running and checking -------------------------------------------------------------------------

let outcomes = new Map<string, Outcome>();
beforeAll(async () => {
  outcomes = await runPool(cases);
}, 1_800_000);

/** Characters that must never reach the terminal raw: controls other than the newline, and bidi overrides. */
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f\u202a-\u202e\u2066-\u2069]/;

describe("hostile and malformed inputs: exit ≠ 0, one error line, no stack, nothing partial", () => {
  for (const c of cases) {
    if (c.skip) {
      test.skip(`${c.name} (skipped: ${c.skip})`, () => {});
      continue;
    }
    test(c.name, () => {
      const r = outcomes.get(c.name)!;
      expect(r.signal).toBeNull(); // neither crashed nor hung until the timeout
      if (c.exitCode !== undefined) expect(r.code).toBe(c.exitCode);
      else expect(r.code).not.toBe(0);
      const errors = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(c.message);
      expect(r.stderr).not.toMatch(/\n\s+at |Bun v\d|panic|^\s*\d+ \| /m);
      expect(r.stderr).not.toMatch(RAW_CONTROL);
      if (c.viaBunRun) expect(r.stderr).toBe(`${errors[0]}\n`);
      expect(r.stdout).toBe("");
      for (const path of c.absent ?? []) expect({ path, exists: existsSync(path) }).toEqual({ path, exists: false });
      for (const [path, text] of Object.entries(c.unchanged ?? {}))
        expect({ path, text: existsSync(path) ? readFileSync(path, "utf8") : null }).toEqual({ path, text });
      for (const d of c.clean ?? []) expect(readdirSync(d).filter((n) => n.includes(".partial-"))).toEqual([]);
      for (const d of c.kept ?? [])
        expect(readdirSync(d).toSorted()).toEqual([
          "breakdown.svg",
          "kernels.csv",
          "latency.svg",
          "report.md",
          "summary.json",
          "trace.json",
          "traffic.svg",
        ]);
    });
  }
});
