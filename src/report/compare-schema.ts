// The schema of every summary.json version `bun run compare` reads: the current one (schema.ts), and the older
// ones derived from it by taking out what each later version added (compare.ts FIELDS_ADDED_IN).
import Ajv2020 from "ajv/dist/2020.js";

import { FIELDS_ADDED_IN, OLDEST_READ_VERSION } from "../profile/compare.ts";
import { SCHEMA_VERSION } from "../profile/types.ts";
import { PROFILE_SUMMARY_SCHEMA, schemaProblems, validateSummary } from "./schema.ts";

/** Where each object that later versions added fields to sits in the schema. */
const SCHEMA_OBJECTS: Record<string, string[]> = {
  "": [], // the summary itself
  "device.launch": ["properties", "device", "properties", "launch"],
  "device.peaks.read_probe": ["properties", "device", "properties", "peaks", "properties", "read_probe"],
  "points[]": ["$defs", "studyPoint"],
  "points[].breakdown": ["$defs", "studyPoint", "properties", "breakdown"],
  predictions: ["properties", "predictions"],
  "predictions.points[]": ["properties", "predictions", "properties", "points", "items"],
  interventions: ["properties", "interventions"],
  "interventions.configs[]": ["properties", "interventions", "properties", "configs", "items"],
  "interventions.points[]": ["properties", "interventions", "properties", "points", "items"],
  settings: ["properties", "settings"],
  "seed_table[]": ["properties", "seed_table", "items"],
  "end_to_end[]": ["properties", "end_to_end", "items"],
  memory: ["properties", "memory"],
  // the agreement's object form, the second of its oneOf
  "peers.results[].agreement": [
    "properties",
    "peers",
    "properties",
    "results",
    "items",
    "properties",
    "agreement",
    "oneOf",
    "1",
  ],
};

type SchemaObject = { properties: Record<string, unknown>; required: string[] };

/** Takes a field (its path as FIELDS_ADDED_IN writes it) out of `schema`: out of its object's properties and required list. */
function removeField(schema: Record<string, unknown>, path: string): void {
  const dot = path.lastIndexOf(".");
  const where = SCHEMA_OBJECTS[dot < 0 ? "" : path.slice(0, dot)];
  if (!where) throw new RangeError(`compare-schema: no schema object for ${path}`);
  const target = where.reduce<Record<string, unknown>>(
    (node, key) => node[key] as Record<string, unknown>,
    schema,
  ) as unknown as SchemaObject;
  const field = path.slice(dot + 1);
  delete target.properties[field];
  target.required = target.required.filter((name) => name !== field);
}

/** The current schema less every field added after `version`, its version constant and id set to `version`. */
function schemaOfVersion(version: number): Record<string, unknown> {
  const schema = structuredClone(PROFILE_SUMMARY_SCHEMA) as unknown as Record<string, unknown> & {
    properties: Record<string, unknown>;
  };
  for (const [since, paths] of Object.entries(FIELDS_ADDED_IN))
    if (Number(since) > version) for (const path of paths) removeField(schema, path);
  schema.$id = `urn:decode-floor:summary:${version}`;
  schema.properties.schema_version = { const: version };
  return schema;
}

// formats unchecked: the date's pattern is schema.ts's, checked in the current version (compare only shows the date)
const ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true, validateFormats: false });
const olderValidators = new Map(
  Array.from({ length: SCHEMA_VERSION - OLDEST_READ_VERSION }, (_, i) => OLDEST_READ_VERSION + i).map((v) => [
    v,
    ajv.compile(schemaOfVersion(v)),
  ]),
);

/** Problems that make `obj` not a summary of `version` (one compare reads), as "<JSON pointer>: <message>" (empty when valid). */
export function validateSummaryVersion(obj: unknown, version: number): string[] {
  if (version === SCHEMA_VERSION) return validateSummary(obj);
  const validate = olderValidators.get(version);
  if (!validate) throw new RangeError(`validateSummaryVersion: compare does not read version ${version}`);
  return validate(obj) ? [] : schemaProblems(validate.errors);
}
