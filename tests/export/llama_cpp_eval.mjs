// Runs GGUF files through llama.cpp (node-llama-cpp 3.22.1, prebuilt CPU backend) for the export
// conformance tests. One Node process for every case, since loading the backend is the slow part.
//
//   node llama_cpp_eval.mjs NPM_CACHE JOBS.json RESULTS.json
//
// JOBS.json: {"cases": [{"name", "model": gguf path, "lora": gguf adapter path or null,
//   "prompt": [ids], "generate": n, "top": k (0: the whole vocabulary), "texts": [strings]}]}
// RESULTS.json: {"results": {name: {"greedy": [ids], "probs": [[[id, p], ...] per step],
//   "tokenize": [[ids] per text]} or {"error": message}}}
//
// Greedy tokens come from llama.cpp's own sampler at temperature 0 (evaluateWithMetadata), with
// the probabilities of each step. The KV cache is F32 (llama.cpp defaults to F16, which alone
// moves probabilities by ~1e-3), flash attention is off and one thread is used (the fastest for
// tiny models, and deterministic).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, jobsPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llama_cpp_eval.mjs NPM_CACHE JOBS.json RESULTS.json");
  process.exit(2);
}
const entry = path.join(npmDir, "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const jobs = JSON.parse(fs.readFileSync(jobsPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: 1 });

function top(probabilities, k) {
  const out = [];
  for (const [token, p] of probabilities) {  // already sorted, most likely first
    out.push([token, p]);
    if (k > 0 && out.length >= k) break;
  }
  return out;
}

const results = {};
for (const job of jobs.cases) {
  const started = Date.now();
  const r = {};
  let model, context;
  try {
    model = await llama.loadModel({ modelPath: job.model });
    const options = {
      contextSize: 256,
      sequences: 1,
      threads: 1,
      flashAttention: false,
      experimentalKvCacheKeyType: "F32",
      experimentalKvCacheValueType: "F32",
    };
    if (job.lora) options.lora = { adapters: [{ filePath: job.lora, scale: 1 }] };
    context = await model.createContext(options);
    const sequence = context.getSequence();
    r.greedy = [];
    r.probs = [];
    const steps = sequence.evaluateWithMetadata(job.prompt, { probabilities: true },
                                                { temperature: 0, yieldEogToken: true });
    for await (const step of steps) {
      r.greedy.push(step.token);
      r.probs.push(top(step.probabilities, job.top));
      if (r.greedy.length >= job.generate) break;
    }
    r.tokenize = (job.texts || []).map((t) => Array.from(model.tokenize(t, false)));
  } catch (e) {
    r.error = String(e && e.message ? e.message : e).split("\n")[0];
  } finally {
    if (context) await context.dispose();
    if (model) await model.dispose();
  }
  r.ms = Date.now() - started;
  results[job.name] = r;
}
await llama.dispose();
fs.writeFileSync(outPath, JSON.stringify({ results }));
