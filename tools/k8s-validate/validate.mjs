// Offline validation of Kubernetes manifests against the Kubernetes OpenAPI
// schema, with unknown fields refused (//tests/k8s:manifests_test).
//
//   node validate.mjs FILE.yaml...      one set of files, checked together
//   node validate.mjs --sets DIR...     each DIR's *.yaml a set of its own
//
// run from a copy of this folder whose node_modules holds
// package-lock.json's packages (install.sh puts them where
// modules-dir.sh says).
//
// Every object of every file goes through three checks; a problem in any
// makes the exit status 1, each printed as FILE:LINE: KIND/NAME: PATH: TEXT:
// - schema: kubernetes-models' validate() (the OpenAPI schema compiled with
//   ajv: types, enums, required fields, int32/int64 ranges). That schema
//   allows fields it does not know;
// - strict: each object is written out as a TypeScript constant of the
//   kind's interface (`const o: IJob = {...}`) and type-checked with tsc
//   --strict, which refuses unknown fields ("imagePullPolice") besides
//   wrong types, enum values and missing fields. A JobSet, which has no
//   model, is checked against jobset.ts, whose replicatedJobs[].template is
//   Kubernetes' JobTemplateSpec;
// - rules: checks.mjs, what no schema says (labels and selectors agree,
//   headless Services publish addresses before readiness, resources,
//   security contexts, probes, ...).
// A kustomization.yaml is not an API object: its resources must exist.
//
// No API server is involved: nothing here can say what a cluster's
// admission (defaults, webhooks, quotas, policies) would make of them.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import ts from "typescript";
import { checkAll } from "./checks.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

const problems = [];
function problem(where, check, text) {
  problems.push({ ...where, check, text });
}

// "batch/v1" + "Job" -> the module kubernetes-models has for it.
function modelPath(apiVersion, kind) {
  return `kubernetes-models/${apiVersion}/${kind}`;
}

const JOBSET_API = "jobset.x-k8s.io/v1alpha2";

// Where each object came from: its file, its YAML document (for lines).
function loadFiles(files) {
  const objects = [];
  for (const file of files) {
    let text;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (e) {
      problem({ file, line: 0 }, "load", e.message);
      continue;
    }
    const lineCounter = new YAML.LineCounter();
    const docs = YAML.parseAllDocuments(text, { lineCounter, prettyErrors: false });
    const docList = Array.isArray(docs) ? docs : [docs];
    docList.forEach((doc, index) => {
      for (const e of doc.errors) {
        const line = e.linePos ? e.linePos[0].line : lineCounter.linePos(e.pos[0]).line;
        problem({ file, line }, "yaml", e.message.split("\n")[0]);
      }
      if (doc.errors.length) return;
      const obj = doc.toJS();
      if (obj === null || obj === undefined) return;
      const line = doc.contents ? lineCounter.linePos(doc.contents.range[0]).line : 1;
      objects.push({ file, index, doc, lineCounter, line, obj });
    });
  }
  return objects;
}

// The line of the YAML node at a path (array of keys and indices) in an
// object's document, or of the nearest ancestor that exists.
function lineOf(o, p) {
  for (let n = p.length; n >= 0; n--) {
    const node = o.doc.getIn(p.slice(0, n), true);
    if (node && node.range) {
      // A key's own line when the path ends at a map entry.
      if (n > 0 && YAML.isMap(o.doc.getIn(p.slice(0, n - 1), true))) {
        const map = o.doc.getIn(p.slice(0, n - 1), true);
        const pair = map.items.find((it) => (YAML.isScalar(it.key) ? it.key.value : it.key) === p[n - 1]);
        if (pair && pair.key && pair.key.range) return o.lineCounter.linePos(pair.key.range[0]).line;
      }
      return o.lineCounter.linePos(node.range[0]).line;
    }
  }
  return o.line;
}

function pathText(p) {
  let s = "";
  for (const k of p) s += typeof k === "number" ? `[${k}]` : (s ? "." : "") + k;
  return s || "(object)";
}

function where(o, p = []) {
  const kind = o.obj && o.obj.kind ? o.obj.kind : "?";
  const name = o.obj && o.obj.metadata && o.obj.metadata.name ? o.obj.metadata.name : "?";
  return { file: o.file, line: lineOf(o, p), object: `${kind}/${name}`, path: pathText(p) };
}

function isKustomization(obj) {
  return typeof obj.apiVersion === "string" && obj.apiVersion.startsWith("kustomize.config.k8s.io/");
}

function checkKustomization(o) {
  const res = o.obj.resources;
  if (!Array.isArray(res) || res.length === 0) {
    problem(where(o, ["resources"]), "kustomize", "no resources");
    return;
  }
  res.forEach((r, i) => {
    const p = path.resolve(path.dirname(o.file), String(r));
    if (!fs.existsSync(p)) problem(where(o, ["resources", i]), "kustomize", `${r} does not exist`);
  });
}

// JSON pointer ("/spec/template/0") -> path array.
function pointerPath(ptr) {
  if (!ptr) return [];
  return ptr
    .split("/")
    .slice(1)
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

function ajvText(e) {
  let t = e.message || e.keyword;
  if (e.params && e.params.allowedValues) t += ` (${e.params.allowedValues.join(", ")})`;
  return t;
}

async function schemaCheck(o) {
  const { apiVersion, kind } = o.obj;
  if (apiVersion === JOBSET_API && kind === "JobSet") {
    const { JobTemplateSpec } = await import(modelPath("batch/v1", "JobTemplateSpec"));
    const rjs = (o.obj.spec && o.obj.spec.replicatedJobs) || [];
    if (!Array.isArray(rjs)) return; // the strict check names it
    for (let i = 0; i < rjs.length; i++) {
      const t = rjs[i] && rjs[i].template;
      if (t === undefined) continue; // the strict check names it
      const base = ["spec", "replicatedJobs", i, "template"];
      try {
        new JobTemplateSpec(t).validate();
      } catch (e) {
        for (const err of e.errors || [{ message: e.message }])
          problem(where(o, [...base, ...pointerPath(err.instancePath)]), "schema", ajvText(err));
      }
    }
    return;
  }
  let mod;
  try {
    mod = await import(modelPath(apiVersion, kind));
  } catch {
    problem(where(o, ["kind"]), "schema", `no schema for apiVersion ${apiVersion} kind ${kind}`);
    return false;
  }
  const Model = mod[kind];
  try {
    new Model(o.obj).validate();
  } catch (e) {
    for (const err of e.errors || [{ message: e.message }])
      problem(where(o, pointerPath(err.instancePath)), "schema", ajvText(err));
  }
  return true;
}

// The strict check: one TypeScript file per object, type-checked together.
function strictCheck(objs, workDir) {
  const gen = fs.mkdtempSync(path.join(workDir, "strict-"));
  fs.copyFileSync(path.join(here, "jobset.ts"), path.join(gen, "jobset.ts"));
  const byFile = new Map();
  objs.forEach((o, i) => {
    const { apiVersion, kind } = o.obj;
    let imp;
    if (apiVersion === JOBSET_API && kind === "JobSet") imp = `import type { IJobSet as T } from "./jobset.js";`;
    else imp = `import type { I${kind} as T } from ${JSON.stringify(modelPath(apiVersion, kind))};`;
    const prefix = `${imp}\nexport const o: T = `;
    const text = `${prefix}${JSON.stringify(o.obj, null, 1)};\n`;
    const f = path.join(gen, `o${i}.ts`);
    fs.writeFileSync(f, text);
    byFile.set(path.resolve(f), o);
  });
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  };
  const program = ts.createProgram([...byFile.keys()], options);
  const diags = ts.getPreEmitDiagnostics(program);
  for (const d of diags) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, " ");
    const o = d.file ? byFile.get(path.resolve(d.file.fileName)) : undefined;
    if (!o) {
      problem({ file: d.file ? d.file.fileName : "(tsc)", line: 0 }, "strict", text);
      continue;
    }
    if (d.start === undefined) {
      problem(where(o), "strict", text);
      continue;
    }
    problem(where(o, astPath(d.file, d.start)), "strict", text);
  }
}

// The path (keys, indices) of the innermost object property or array element
// of the exported constant's initializer that holds position pos.
function astPath(sf, pos) {
  const out = [];
  let init;
  sf.forEachChild((st) => {
    if (ts.isVariableStatement(st)) init = st.declarationList.declarations[0].initializer;
  });
  let node = init;
  while (node) {
    let next;
    if (ts.isObjectLiteralExpression(node)) {
      for (const prop of node.properties) {
        if (pos >= prop.getStart(sf) && pos < prop.getEnd() && ts.isPropertyAssignment(prop)) {
          out.push(prop.name.text);
          next = prop.initializer;
          break;
        }
      }
    } else if (ts.isArrayLiteralExpression(node)) {
      node.elements.forEach((el, i) => {
        if (!next && pos >= el.getStart(sf) && pos < el.getEnd()) {
          out.push(i);
          next = el;
        }
      });
    }
    node = next;
  }
  return out;
}

// The files to check, as sets: each set is validated on its own (its
// cross-object rules see only its own objects), one tsc run for them all.
function parseArgs(argv) {
  if (argv[0] !== "--sets") return [{ name: "", files: argv }];
  return argv.slice(1).map((dir) => ({
    name: dir,
    files: fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f)),
  }));
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv.length === 0 || (argv[0] === "--sets" && argv.length === 1)) {
    console.error("usage: node validate.mjs FILE.yaml...\n       node validate.mjs --sets DIR...  (each DIR's *.yaml a set of its own)");
    process.exit(2);
  }
  const t0 = Date.now();
  const sets = parseArgs(argv);
  const setOf = new Map();
  const api = [];
  let nfiles = 0;
  for (const set of sets) {
    set.api = [];
    nfiles += set.files.length;
    for (const f of set.files) setOf.set(f, set);
    for (const o of loadFiles(set.files)) {
      if (typeof o.obj !== "object" || Array.isArray(o.obj)) {
        problem(where(o), "schema", "a document that is not a mapping");
        continue;
      }
      if (isKustomization(o.obj)) {
        checkKustomization(o);
        continue;
      }
      if (typeof o.obj.apiVersion !== "string" || typeof o.obj.kind !== "string") {
        problem(where(o), "schema", "no apiVersion or kind");
        continue;
      }
      if (await schemaCheck(o) !== false) set.api.push(o);
    }
    api.push(...set.api);
  }
  // Beside node_modules, where the generated files' imports resolve.
  const work = fs.mkdtempSync(path.join(here, ".k8s-validate-"));
  try {
    if (api.length) strictCheck(api, work);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  for (const set of sets)
    for (const p of checkAll(set.api)) problem(where(p.o, p.path), "rules", p.text);

  problems.sort((a, b) => (a.file === b.file ? a.line - b.line : a.file < b.file ? -1 : 1));
  for (const p of problems) {
    const obj = p.object ? ` ${p.object}:` : "";
    const at = p.path ? ` ${p.path}:` : "";
    console.log(`${p.file}:${p.line}:${obj}${at} ${p.text} [${p.check}]`);
  }
  if (sets.length > 1 || sets[0].name) {
    for (const set of sets) {
      const n = problems.filter((p) => setOf.get(p.file) === set).length;
      console.log(`k8s-validate: set ${set.name}: ${n ? `${n} problems` : "ok"}`);
    }
  }
  const secs = ((Date.now() - t0) / 1000).toFixed(2);
  const summary = `${api.length} objects in ${nfiles} files, ${secs} s`;
  if (problems.length) {
    console.log(`k8s-validate: ${problems.length} problems (${summary})`);
    process.exit(1);
  }
  console.log(`k8s-validate: ok (${summary})`);
}

main().catch((e) => {
  console.error(`k8s-validate: ${e.stack || e}`);
  process.exit(2);
});
