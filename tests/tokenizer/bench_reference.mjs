// Reference throughput for scripts/bench_tokenizer.sh: @huggingface/tokenizers encoding the same
// text the same way as bench_tokenizer (one document per line, no special tokens, one warm-up
// pass, best of PASSES timed passes).
//   node bench_reference.mjs TOKENIZERS_MJS MODEL_DIR TEXT_FILE [PASSES]
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [lib, dir, textFile, passesArg] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(lib).href);
const t0 = performance.now();
const tok = new Tokenizer(
  JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")));
const loadS = (performance.now() - t0) / 1000;
const lines = fs.readFileSync(textFile, "utf8").split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
const passes = Math.max(1, parseInt(passesArg ?? "3", 10));
let best = Infinity, tokens = 0;
for (let pass = 0; pass <= passes; ++pass) {
  const start = performance.now();
  let n = 0;
  for (const line of lines) n += tok.encode(line, { add_special_tokens: false }).ids.length;
  const s = (performance.now() - start) / 1000;
  if (pass > 0) best = Math.min(best, s);
  tokens = n;
}
console.log(`tokens=${tokens} seconds=${best.toFixed(4)} tokens_per_s=${Math.round(tokens / best)} load_s=${loadS.toFixed(3)}`);
