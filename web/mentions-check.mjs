// Conformance runner for web/mentions.js (SPEC.md §8).
//
//   node web/mentions-check.mjs VECTORS.json
//       Runs every case; prints "N passed, M failed"; exits 0 only when nothing failed.
//   node web/mentions-check.mjs --resolve INPUTS.json
//       Prints the full resolution of each input as JSON (used by the Python/JS agreement test).
//       INPUTS.json: {"rosters": {key: roster},
//                     "inputs": [{"roster": key, "sender", "text", "chips"}]}

import { readFileSync } from "node:fs";
import { buildRoster, resolve } from "./mentions.js";

function rosterLookup(doc) {
  const named = new Map(Object.entries(doc.rosters ?? {}).map(([k, r]) => [k, buildRoster(r)]));
  return (ref) => {
    if (typeof ref !== "string") return buildRoster(ref);
    if (!named.has(ref)) throw new Error(`unknown roster ${JSON.stringify(ref)}`);
    return named.get(ref);
  };
}

function check(doc) {
  const roster = rosterLookup(doc);
  let passed = 0;
  let failed = 0;
  for (const c of doc.cases) {
    const result = resolve(c.text, roster(c.roster), c.sender, c.chips ?? []);
    // Candidates are compared, in order, when the expected diagnostic lists them (SPEC §8).
    const checked = ({ code, name, candidates }, want) =>
      want && "candidates" in want ? { code, name, candidates } : { code, name };
    const got = {
      mentioned: result.mentioned,
      diagnostics: result.diagnostics.map((d, i) => checked(d, c.expect.diagnostics[i])),
    };
    const want = {
      mentioned: c.expect.mentioned,
      diagnostics: c.expect.diagnostics.map((d) => checked(d, d)),
    };
    if (JSON.stringify(got) === JSON.stringify(want)) {
      passed += 1;
    } else {
      failed += 1;
      console.log(`FAIL ${c.name}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  if (passed + failed === 0) {
    console.error("error: the file has no cases");
    return 1;
  }
  return failed ? 1 : 0;
}

function resolveAll(doc) {
  const roster = rosterLookup(doc);
  const out = doc.inputs.map((i) => resolve(i.text, roster(i.roster), i.sender, i.chips ?? []));
  process.stdout.write(JSON.stringify(out));
  return 0;
}

function main(argv) {
  const [first, second] = argv;
  const mode = first === "--resolve" ? "resolve" : "check";
  const path = mode === "resolve" ? second : first;
  if (!path || argv.length !== (mode === "resolve" ? 2 : 1)) {
    console.error("usage: node web/mentions-check.mjs [--resolve] PATH");
    return 2;
  }
  let doc;
  try {
    doc = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    console.error(`error: cannot read ${path}: ${err.message}`);
    return 2;
  }
  try {
    return mode === "resolve" ? resolveAll(doc) : check(doc);
  } catch (err) {
    console.error(`error: cannot run ${path}: ${err.message}`);
    return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
