import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type GPT2Config, loadModel, materializeWeights, randomWeights, saveModel } from "../src/model/gpt2.ts";
import { printable } from "../src/errors.ts";
import {
  firstDuplicateKey,
  MAX_HEADER_BYTES,
  parseSafetensors,
  readSafetensors,
  tensorFloat32,
} from "../src/model/safetensors.ts";
import { expectUserError } from "./helpers/expect.ts";

const tmp = mkdtempSync(join(tmpdir(), "safetensors-test-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// ---- writers ----------------------------------------------------------------------------------

/**
 * A safetensors file: u64 LE header length (default: the JSON's), JSON header, data. Like the reference writer the
 * header is space-padded so the data starts 8-byte aligned; `pad` adds that many more spaces, to misalign it.
 */
function encodeFile(header: unknown, data: Uint8Array, opts: { headerLen?: bigint; pad?: number } = {}): Uint8Array {
  const text = JSON.stringify(header);
  const json = new TextEncoder().encode(text + " ".repeat(((8 - (text.length % 8)) % 8) + (opts.pad ?? 0)));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, opts.headerLen ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

interface RawTensor {
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/** Lays the tensors out back to back and returns the matching header and data section. */
function layout(tensors: Record<string, RawTensor>): { header: Record<string, unknown>; data: Uint8Array } {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes.length] };
    chunks.push(t.bytes);
    offset += t.bytes.length;
  }
  const data = new Uint8Array(offset);
  let at = 0;
  for (const c of chunks) {
    data.set(c, at);
    at += c.length;
  }
  return { header, data };
}

const f32 = (values: number[], shape = [values.length]): RawTensor => ({
  dtype: "F32",
  shape,
  bytes: new Uint8Array(new Float32Array(values).buffer),
});
const u16 = (dtype: string, bits: number[]): RawTensor => ({
  dtype,
  shape: [bits.length],
  bytes: new Uint8Array(new Uint16Array(bits).buffer),
});

function fileOf(tensors: Record<string, RawTensor>, opts?: { pad?: number }): Uint8Array {
  const { header, data } = layout(tensors);
  return encodeFile(header, data, opts);
}

// ---- format --------------------------------------------------------------------------------------

describe("parseSafetensors", () => {
  test("reads F32 tensors and __metadata__", () => {
    const bytes = fileOf({ a: f32([1, 2, 3, 4], [2, 2]), b: f32([-0.5]) });
    const file = parseSafetensors(bytes, "x.safetensors");
    expect([...file.tensors.keys()]).toEqual(["a", "b"]);
    expect(file.tensors.get("a")!.shape).toEqual([2, 2]);
    expect(file.dataStart % 8).toBe(0);
    expect([...tensorFloat32(file, file.tensors.get("a")!)]).toEqual([1, 2, 3, 4]);
    expect([...tensorFloat32(file, file.tensors.get("b")!)]).toEqual([-0.5]);
  });

  test("reads F32 data at any alignment of the data section", () => {
    for (let pad = 0; pad < 4; pad++) {
      const file = parseSafetensors(fileOf({ a: f32([1.25, -7, 3e-8]) }, { pad }), "x.safetensors");
      expect([...tensorFloat32(file, file.tensors.get("a")!)]).toEqual([...new Float32Array([1.25, -7, 3e-8])]);
    }
  });

  test("widens F16 exactly, aligned or not", () => {
    // 1.5, -2.0, 65504 (max), 0, -0, 2^-24 (smallest subnormal), 2^-14 (smallest normal)
    const bits = [0x3e00, 0xc000, 0x7bff, 0x0000, 0x8000, 0x0001, 0x0400];
    const expected = [1.5, -2.0, 65504, 0, -0, 2 ** -24, 2 ** -14];
    for (const pad of [0, 1]) {
      const file = parseSafetensors(fileOf({ h: u16("F16", bits) }, { pad }), "x.safetensors");
      expect([...tensorFloat32(file, file.tensors.get("h")!)]).toEqual(expected);
    }
  });

  test("non-finite values are rejected where they are read, with the tensor and element named", () => {
    const cases: Array<[RawTensor, RegExp]> = [
      [f32([1, NaN, 3]), /tensor w \(F32\) holds NaN at element 1 of 3; weights must be finite/],
      [f32([1, 2, Infinity]), /tensor w \(F32\) holds Infinity at element 2 of 3/],
      [f32([-Infinity]), /holds -Infinity at element 0 of 1/],
      [u16("F16", [0x3c00, 0x7c00]), /tensor w \(F16\) holds Infinity at element 1 of 2/], // F16 +inf widens to +inf
      [u16("F16", [0xfe00]), /tensor w \(F16\) holds NaN at element 0/],
      [u16("BF16", [0x3f80, 0x3f80, 0xff80]), /tensor w \(BF16\) holds -Infinity at element 2 of 3/],
    ];
    for (const [tensor, pattern] of cases) {
      const file = parseSafetensors(fileOf({ w: tensor }), "x.safetensors");
      expectUserError(() => tensorFloat32(file, file.tensors.get("w")!), pattern);
    }
  });

  test("widens BF16 exactly", () => {
    // 1.5, -2.0, 65280, 3.140625, 2^-126 — bf16 is the top half of the float32 bits
    const bits = [0x3fc0, 0xc000, 0x477f, 0x4049, 0x0080];
    const file = parseSafetensors(fileOf({ b: u16("BF16", bits) }, { pad: 1 }), "x.safetensors");
    expect([...tensorFloat32(file, file.tensors.get("b")!)]).toEqual([1.5, -2.0, 65280, 3.140625, 2 ** -126]);
  });

  test("known dtypes other than F32/F16/BF16 parse but cannot be read as weights", () => {
    const t: RawTensor = { dtype: "F64", shape: [1], bytes: new Uint8Array(new Float64Array([1]).buffer) };
    const file = parseSafetensors(fileOf({ w: t }), "x.safetensors");
    expectUserError(
      () => tensorFloat32(file, file.tensors.get("w")!),
      /x\.safetensors: tensor w has dtype F64; weights must be F32, F16 or BF16/,
    );
  });

  test("file shorter than 8 bytes", () => {
    expectUserError(
      () => parseSafetensors(new Uint8Array(5), "short.safetensors"),
      /short\.safetensors: .*shorter than the 8-byte header length/,
    );
  });

  test("header length past the end of the file", () => {
    const bytes = encodeFile({}, new Uint8Array(0), { headerLen: 1000n });
    expectUserError(
      () => parseSafetensors(bytes, "f.safetensors"),
      /f\.safetensors: header length 1000 runs past the end of the file/,
    );
  });

  test("header length above the cap", () => {
    const bytes = encodeFile({}, new Uint8Array(0), { headerLen: BigInt(MAX_HEADER_BYTES) + 1n });
    expectUserError(() => parseSafetensors(bytes, "f.safetensors"), /header length \d+ bytes is above the 100 MiB cap/);
    const huge = encodeFile({}, new Uint8Array(0), { headerLen: 2n ** 63n });
    expectUserError(() => parseSafetensors(huge, "f.safetensors"), /above the 100 MiB cap/);
  });

  test("header not JSON, or not an object", () => {
    const garbage = new Uint8Array(16);
    new DataView(garbage.buffer).setBigUint64(0, 8n, true);
    garbage.set(new TextEncoder().encode("{nope!!}"), 8);
    expectUserError(() => parseSafetensors(garbage, "f.safetensors"), /f\.safetensors: header is not valid JSON/);
    expectUserError(
      () => parseSafetensors(encodeFile([1, 2], new Uint8Array(0)), "f.safetensors"),
      /header is not a JSON object/,
    );
    expectUserError(
      () => parseSafetensors(encodeFile(null, new Uint8Array(0)), "f.safetensors"),
      /header is not a JSON object/,
    );
    const badMeta = encodeFile({ __metadata__: 3 }, new Uint8Array(0));
    expectUserError(() => parseSafetensors(badMeta, "f.safetensors"), /__metadata__ is not a JSON object/);
    const badEntry = encodeFile({ w: "F32" }, new Uint8Array(0));
    expectUserError(() => parseSafetensors(badEntry, "f.safetensors"), /tensor w: header entry is not an object/);
  });

  test("truncated file: data shorter than the offsets", () => {
    const full = fileOf({ a: f32([1, 2, 3]), b: f32([4, 5, 6, 7]) });
    const cut = full.subarray(0, full.length - 6);
    expectUserError(
      () => parseSafetensors(cut, "cut.safetensors"),
      /cut\.safetensors: tensor b: data_offsets \[12, 28\] run past the end of the data section \(22 bytes; truncated\?\)/,
    );
  });

  test("offsets out of range or malformed", () => {
    const data = new Uint8Array(8);
    const withOffsets = (data_offsets: unknown) => encodeFile({ w: { dtype: "F32", shape: [2], data_offsets } }, data);
    expectUserError(
      () => parseSafetensors(withOffsets([8, 16]), "f.safetensors"),
      /tensor w: data_offsets \[8, 16\] run past the end of the data section \(8 bytes/,
    );
    expectUserError(
      () => parseSafetensors(withOffsets([8, 0]), "f.safetensors"),
      /tensor w: data_offsets \[8, 0\] have begin after end/,
    );
    expectUserError(
      () => parseSafetensors(withOffsets([-4, 4]), "f.safetensors"),
      /tensor w: data_offsets must be \[begin, end\]/,
    );
    expectUserError(
      () => parseSafetensors(withOffsets([0]), "f.safetensors"),
      /tensor w: data_offsets must be \[begin, end\]/,
    );
    expectUserError(
      () => parseSafetensors(withOffsets([0, 4]), "f.safetensors"),
      /tensor w: data_offsets \[0, 4\] hold 4 bytes but F32 shape \[2\] needs 8/,
    );
  });

  test("overlapping offsets", () => {
    const header = {
      a: { dtype: "F32", shape: [3], data_offsets: [0, 12] },
      b: { dtype: "F32", shape: [2], data_offsets: [8, 16] },
    };
    expectUserError(
      () => parseSafetensors(encodeFile(header, new Uint8Array(16)), "f.safetensors"),
      /f\.safetensors: tensors a \[0, 12\] and b \[8, 16\] overlap/,
    );
    const nested = {
      big: { dtype: "F32", shape: [4], data_offsets: [0, 16] },
      mid: { dtype: "F32", shape: [1], data_offsets: [16, 20] },
      inner: { dtype: "F32", shape: [1], data_offsets: [4, 8] },
    };
    expectUserError(
      () => parseSafetensors(encodeFile(nested, new Uint8Array(20)), "f.safetensors"),
      /tensors big \[0, 16\] and inner \[4, 8\] overlap/,
    );
    const empty = {
      z: { dtype: "F32", shape: [0], data_offsets: [4, 4] },
      a: { dtype: "F32", shape: [2], data_offsets: [0, 8] },
    };
    expect(parseSafetensors(encodeFile(empty, new Uint8Array(8)), "f.safetensors").tensors.size).toBe(2);
  });

  test("holes: bytes no tensor owns, between tensors or at the end, are rejected", () => {
    const gap = {
      a: { dtype: "F32", shape: [1], data_offsets: [0, 4] },
      b: { dtype: "F32", shape: [1], data_offsets: [8, 12] },
    };
    expectUserError(
      () => parseSafetensors(encodeFile(gap, new Uint8Array(12)), "f.safetensors"),
      /f\.safetensors: bytes \[4, 8\) of the data section belong to no tensor \(a hole before b \[8, 12\]\)/,
    );
    const late = { a: { dtype: "F32", shape: [1], data_offsets: [4, 8] } };
    expectUserError(
      () => parseSafetensors(encodeFile(late, new Uint8Array(8)), "f.safetensors"),
      /bytes \[0, 4\) of the data section belong to no tensor/,
    );
    const tail = { a: { dtype: "F32", shape: [1], data_offsets: [0, 4] } };
    expectUserError(
      () => parseSafetensors(encodeFile(tail, new Uint8Array(5)), "f.safetensors"),
      /bytes \[4, 5\) at the end of the data section belong to no tensor/,
    );
    expectUserError(
      () => parseSafetensors(encodeFile({}, new Uint8Array(3)), "f.safetensors"),
      /bytes \[0, 3\) at the end/,
    );
  });

  test("duplicate keys anywhere in the header are rejected (JSON.parse would keep the last)", () => {
    const entry = (begin: number) => `{"dtype":"F32","shape":[1],"data_offsets":[${begin},${begin + 4}]}`;
    const texts = [
      `{"a":${entry(0)},"a":${entry(4)}}`,
      `{"a":${entry(0)},"\u0061":${entry(4)}}`, // the same key, spelt with an escape
      `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"data_offsets":[4,8]}}`,
      `{"__metadata__":{"k":"1","k":"2"},"a":${entry(0)}}`,
    ];
    for (const text of texts) {
      const json = new TextEncoder().encode(text);
      const bytes = new Uint8Array(8 + json.length + 8);
      new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
      bytes.set(json, 8);
      expectUserError(
        () => parseSafetensors(bytes, "f.safetensors"),
        /f\.safetensors: header has the key "(a|data_offsets|k)" twice in one object/,
      );
    }
  });

  test("firstDuplicateKey follows objects and arrays, and reads keys only where keys stand", () => {
    expect(firstDuplicateKey(`{"a":1,"b":{"a":2},"c":["a","a"],"d":[{"x":1},{"x":2}]}`)).toBeNull();
    expect(firstDuplicateKey(`{"a":"b","b":"a","s":"\\"","a":0}`)).toBe("a");
    expect(firstDuplicateKey(`[{"x":1,"y":{"z":[1,{"q":1,"q":2}]}}]`)).toBe("q");
    expect(firstDuplicateKey(`{"k,":1,"k":2}`)).toBeNull();
  });

  test("names with control, NUL, newline or bidi characters are escaped: every message is one line", () => {
    for (const name of ["bad\nname", "nul\u0000x", "rtl\u202eevil", "esc\u001b[31m", "sep\u2028x"]) {
      const header = { [name]: { dtype: "Q8", shape: [1], data_offsets: [0, 1] } };
      let message = "";
      try {
        parseSafetensors(encodeFile(header, new Uint8Array(1)), "f.safetensors");
      } catch (e) {
        message = (e as Error).message;
      }
      expect(message).toMatch(/has unknown dtype "Q8"/);
      expect(message).not.toMatch(/[\u0000-\u001f\u202e\u2028]/);
      expect(message).toContain(printable(name));
    }
    expect(printable("a\nb\u202ec\u0000")).toBe("a\\nb\\u202ec\\u0000");
  });

  test("unknown dtype names the tensor and the dtype", () => {
    const header = { "h.0.ln_1.weight": { dtype: "F12", shape: [1], data_offsets: [0, 4] } };
    expectUserError(
      () => parseSafetensors(encodeFile(header, new Uint8Array(4)), "f.safetensors"),
      /f\.safetensors: tensor h\.0\.ln_1\.weight has unknown dtype "F12"/,
    );
  });

  test("shape must be an array of non-negative integers", () => {
    for (const shape of [[-1], [1.5], "3", null, [[2]]]) {
      const header = { w: { dtype: "U8", shape, data_offsets: [0, 0] } };
      expectUserError(
        () => parseSafetensors(encodeFile(header, new Uint8Array(0)), "f.safetensors"),
        /tensor w: shape must be an array of non-negative integers/,
      );
    }
  });

  test("readSafetensors opens regular files only: a FIFO does not block, a device or a directory is refused", () => {
    const fifo = join(tmp, "fifo.safetensors");
    expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
    expectUserError(() => readSafetensors(fifo), /fifo\.safetensors is a FIFO \(named pipe\), not a regular file/);
    const zero = join(tmp, "zero.safetensors");
    symlinkSync("/dev/zero", zero);
    expectUserError(() => readSafetensors(zero), /zero\.safetensors is a character device, not a regular file/);
    expectUserError(() => readSafetensors(tmp), /is a directory, not a regular file/);
  });

  test("readSafetensors reads the header only: a hostile length on a large sparse file is refused before any allocation", () => {
    const sparse = join(tmp, "sparse.safetensors");
    const header = new Uint8Array(8);
    new DataView(header.buffer).setBigUint64(0, BigInt(MAX_HEADER_BYTES) + 1n, true);
    writeFileSync(sparse, header);
    truncateSync(sparse, 3 * 2 ** 30); // 3 GiB of holes: reading it whole would take gigabytes
    expectUserError(() => readSafetensors(sparse), /header length 104857601 bytes is above the 100 MiB cap/);
  });

  test("a file changed on disk between its header and its data is an error", () => {
    const path = join(tmp, "changing.safetensors");
    writeFileSync(path, fileOf({ a: f32([1, 2]) }));
    const file = readSafetensors(path);
    writeFileSync(path, fileOf({ b: f32([1, 2]) })); // the same size, another header
    expectUserError(
      () => tensorFloat32(file, file.tensors.get("a")!),
      /changing\.safetensors: the file changed on disk after its header was read/,
    );
    writeFileSync(path, new Uint8Array([...fileOf({ a: f32([1, 2]) }), 0])); // the same header, a byte more
    expectUserError(() => tensorFloat32(file, file.tensors.get("a")!), /the file changed on disk/);
  });

  test("readSafetensors: missing file", () => {
    expectUserError(
      () => readSafetensors(join(tmp, "nope.safetensors")),
      /nope\.safetensors: cannot open: file not found \(ENOENT\)/,
    );
  });
});

// ---- model directories --------------------------------------------------------------------

const CFG: GPT2Config = {
  name: "t",
  n_layer: 2,
  n_head: 2,
  n_embd: 8,
  n_positions: 6,
  vocab_size: 11,
  layer_norm_epsilon: 1e-5,
};
const HF_CONFIG = {
  model_type: "gpt2",
  n_layer: 2,
  n_head: 2,
  n_embd: 8,
  n_positions: 6,
  vocab_size: 11,
  layer_norm_epsilon: 1e-5,
};

/** All tensors of `randomWeights(CFG, 7)` plus the two causal-mask buffers, as F32. */
function modelTensors(): Record<string, RawTensor> {
  const out: Record<string, RawTensor> = {};
  for (const [name, data] of materializeWeights(randomWeights(CFG, 7))) {
    out[name] = f32([...data], shapeOf(name));
  }
  for (let i = 0; i < CFG.n_layer; i++)
    out[`h.${i}.attn.bias`] = { dtype: "BOOL", shape: [1, 1, 6, 6], bytes: new Uint8Array(36) };
  return out;
}

function shapeOf(name: string): number[] {
  const C = CFG.n_embd;
  if (name === "wte.weight") return [CFG.vocab_size, C];
  if (name === "wpe.weight") return [CFG.n_positions, C];
  const linear: Record<string, [number, number]> = {
    "attn.c_attn": [C, 3 * C],
    "attn.c_proj": [C, C],
    "mlp.c_fc": [C, 4 * C],
    "mlp.c_proj": [4 * C, C],
  };
  const key = Object.keys(linear).find((k) => name.includes(`.${k}.`));
  if (!key) return [C]; // LayerNorm
  const [inC, outC] = linear[key]!;
  return name.endsWith(".weight") ? [inC, outC] : [outC];
}

let dirCount = 0;
/** A checkpoint directory; null leaves that file out, `pad` misaligns the data section. */
function modelDir(tensors: Record<string, RawTensor> | null, config: unknown = HF_CONFIG, pad = 0): string {
  const dir = join(tmp, `model-${dirCount++}`);
  mkdirSync(dir);
  if (config !== null) writeFileSync(join(dir, "config.json"), JSON.stringify(config));
  if (tensors !== null) writeFileSync(join(dir, "model.safetensors"), fileOf(tensors, { pad }));
  return dir;
}

describe("loadModel on broken checkpoints", () => {
  test("a well-formed checkpoint round-trips randomWeights, aligned or not", () => {
    const expected = materializeWeights(randomWeights(CFG, 7));
    for (const pad of [0, 1, 2]) {
      const w = loadModel(modelDir(modelTensors(), HF_CONFIG, pad));
      expect(materializeWeights(w)).toEqual(expected);
      expect(w.skipped).toEqual({ tensors: 2, bytes: 72, names: ["h.0.attn.bias", "h.1.attn.bias"] });
    }
  });

  test("saveModel writes a checkpoint (config.json + F32 safetensors, data 8-byte aligned) that loads back bit for bit", () => {
    const dir = join(tmp, "saved");
    const w = randomWeights(CFG, 7);
    saveModel(w, dir);
    const back = loadModel(dir);
    expect({ ...back.config, name: "t" }).toEqual(CFG);
    expect(materializeWeights(back)).toEqual(materializeWeights(w));
    const file = readSafetensors(join(dir, "model.safetensors"));
    expect(file.dataStart % 8).toBe(0);
    expect([...file.tensors.values()].every((t) => t.dtype === "F32")).toBe(true);
    expect(file.tensors.get("h.1.mlp.c_fc.weight")!.shape).toEqual([8, 32]);
  });

  test("a shape that disagrees with the config", () => {
    const tensors = modelTensors();
    tensors["h.1.attn.c_attn.weight"] = f32(new Array(8 * 23).fill(0), [8, 23]);
    const dir = modelDir(tensors);
    expectUserError(
      () => loadModel(dir),
      /model\.safetensors: h\.1\.attn\.c_attn\.weight has shape \[8, 23\], expected \[8, 24\] \(config: .*config\.json\)/,
    );
  });

  test("a config that disagrees with the weights", () => {
    const dir = modelDir(modelTensors(), { ...HF_CONFIG, n_embd: 16 });
    expectUserError(() => loadModel(dir), /wte\.weight has shape \[11, 8\], expected \[11, 16\].*\(and \d+ more\)/);
  });

  test("a missing tensor", () => {
    const tensors = modelTensors();
    delete tensors["h.0.mlp.c_proj.bias"];
    expectUserError(
      () => loadModel(modelDir(tensors)),
      /model\.safetensors: h\.0\.mlp\.c_proj\.bias is missing \(expected \[8\]\)/,
    );
  });

  test("unexpected extra tensors", () => {
    const tensors = { ...modelTensors(), "h.2.ln_1.weight": f32(new Array(8).fill(1)), "score.weight": f32([0]) };
    expectUserError(
      () => loadModel(modelDir(tensors)),
      /model\.safetensors: unexpected tensors h\.2\.ln_1\.weight, score\.weight/,
    );
  });

  test("missing config.json", () => {
    const dir = modelDir(modelTensors(), null);
    expectUserError(() => loadModel(dir), /no config\.json in .*model-\d+/);
  });

  test("missing model.safetensors", () => {
    const dir = modelDir(null);
    expectUserError(() => loadModel(dir), /no model\.safetensors in .*model-\d+/);
  });

  test("missing directory", () => {
    expectUserError(() => loadModel(join(tmp, "absent")), /model directory not found: .*absent/);
  });

  test("a weight in an unsupported dtype", () => {
    const tensors = modelTensors();
    tensors["ln_f.bias"] = { dtype: "I64", shape: [8], bytes: new Uint8Array(64) };
    expectUserError(
      () => loadModel(modelDir(tensors)),
      /tensor ln_f\.bias has dtype I64; weights must be F32, F16 or BF16/,
    );
  });

  test("a tied lm_head.weight is accepted and skipped; an untied one is rejected", () => {
    const tensors = modelTensors();
    const tied = loadModel(modelDir({ ...tensors, "lm_head.weight": tensors["wte.weight"]! }));
    expect(tied.skipped.names).toContain("lm_head.weight");
    expect(tied.skipped.bytes).toBe(72 + 11 * 8 * 4);

    const other = f32(new Array(88).fill(0.5), [11, 8]);
    // the values are compared as they stream
    const untied = loadModel(modelDir({ ...tensors, "lm_head.weight": other }));
    expectUserError(
      () => materializeWeights(untied),
      /lm_head\.weight differs from wte\.weight; untied output embeddings are not supported/,
    );
    const wrongShape = f32(new Array(88).fill(0.5), [8, 11]);
    expectUserError(
      () => loadModel(modelDir({ ...tensors, "lm_head.weight": wrongShape })),
      /lm_head\.weight has shape \[8, 11\], expected \[11, 8\]/,
    );
  });

  test("F16 and BF16 checkpoints are widened to float32", () => {
    for (const dtype of ["F16", "BF16"]) {
      const tensors = modelTensors();
      tensors["ln_f.weight"] = u16(dtype, new Array(8).fill(dtype === "F16" ? 0x3e00 : 0x3fc0)); // 1.5
      expect([...materializeWeights(loadModel(modelDir(tensors))).get("ln_f.weight")!]).toEqual(new Array(8).fill(1.5));
    }
  });
});
