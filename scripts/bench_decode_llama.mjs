// The llama.cpp peer of `ctune generate`, for scripts/bench_decode.sh: greedy generation through
// node-llama-cpp (3.22.1, prebuilt CPU backend) on the GGUF that `ctune export` wrote from the
// same weights. Shares no code with ctune.
//
//   node bench_decode_llama.mjs NPM_DIR GGUF CTUNE.jsonl BATCH MAX_NEW_TOKENS THREADS KV_TYPE
//
// The prompts are the prompt_ids of `ctune generate --json` (2 x BATCH lines, one length), fed
// to llama.cpp as token ids (LlamaContextSequence.evaluate: nothing is tokenised again). The
// first BATCH are an untimed warm-up generation, as on the other sides; the next BATCH are timed.
// A batch is BATCH sequences of one context (createContext({sequences})), evaluated concurrently:
// node-llama-cpp puts the tokens that every sequence has queued into one llama_decode. Left to
// themselves, the sequences drift apart: each one's sampled token comes back at a slightly
// different time and its next token is queued at once, so a step at batch 8 split into two or
// three decodes of 2-5 tokens (each reading all the weights). Here each sequence waits, before it
// asks for its next token, until every running sequence has its token of this step (a barrier),
// so each step is one llama_decode of all of them, as ctune's is one forward pass.
// Greedy is llama.cpp's own sampler at temperature 0. KV_TYPE is the cache's element type (F32
// for the fp32 comparison, BF16 for bf16: ctune keeps its cache in the compute dtype); flash
// attention is left at llama.cpp's default ("auto"). A sequence stops at an end-of-generation
// token (llama.cpp's vocabulary says which) or after MAX_NEW_TOKENS.
// Timing follows ctune's GenerateStats: prefill = from the start until every sequence has its
// first token, over the prompt tokens; decode = from then to the last token, over the tokens
// after each sequence's first. Prints one JSON line as scripts/bench_decode.py does.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, modelPath, promptsPath, batchArg, newArg, threadsArg, kvType] = process.argv.slice(2);
if (!kvType) {
  console.error("usage: node bench_decode_llama.mjs NPM_DIR GGUF CTUNE.jsonl BATCH MAX_NEW_TOKENS THREADS KV_TYPE");
  process.exit(2);
}
const B = Number(batchArg), N = Number(newArg), threads = Number(threadsArg);
const entry = path.join(npmDir, "node_modules", "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

const prompts = fs.readFileSync(promptsPath, "utf8").split("\n").filter((l) => l.trim())
  .map((l) => JSON.parse(l).prompt_ids);
const P = prompts[0].length;
if (prompts.length !== 2 * B || prompts.some((p) => p.length !== P)) {
  console.error(`bench_decode_llama.mjs: want 2 x ${B} prompts of one length, got ${prompts.length}`);
  process.exit(2);
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({
  contextSize: P + N + 1,  // per sequence
  sequences: B,
  batchSize: B * P,        // every prompt in one batch, as ctune's prefill is one forward pass
  threads: { ideal: threads, min: threads },
  experimentalKvCacheKeyType: kvType,
  experimentalKvCacheValueType: kvType,
});
// A barrier per step: arrive() resolves once every running sequence has arrived; a sequence that
// stops leaves (and may complete the step for the others).
let running = 0, arrived = 0, waiters = [];
function release() {
  if (arrived < running) return;
  arrived = 0;
  const w = waiters;
  waiters = [];
  for (const resolve of w) resolve();
}
function arrive() {
  arrived++;
  const p = new Promise((resolve) => waiters.push(resolve));
  release();
  return p;
}
function leave() { running--; release(); }
const sequences = Array.from({ length: B }, () => context.getSequence());

async function generate(group) {
  const now = () => Number(process.hrtime.bigint()) / 1e9;
  const out = group.map(() => []), reasons = group.map(() => "eos"), first = group.map(() => 0);
  let last = 0;
  running = group.length;
  const t0 = now();
  await Promise.all(group.map(async (ids, b) => {
    for await (const token of sequences[b].evaluate(ids, { temperature: 0 })) {
      const t = now();
      if (out[b].length === 0) first[b] = t;
      out[b].push(token);
      last = Math.max(last, t);
      if (out[b].length >= N) { reasons[b] = "length"; break; }
      await arrive();
    }
    leave();
  }));
  const prefillEnd = Math.max(...first);
  const decodeTokens = out.reduce((s, o) => s + Math.max(0, o.length - 1), 0);
  return { out, reasons, prefill_s: prefillEnd - t0, decode_s: last - prefillEnd, decodeTokens };
}

fs.writeFileSync("/proc/self/clear_refs", "5");  // the peak is generation's, not loading's
await generate(prompts.slice(0, B));  // warm-up (weights paged in, compute buffers touched)
for (const s of sequences) await s.clearHistory();
const r = await generate(prompts.slice(B));
const hwm = fs.readFileSync("/proc/self/status", "utf8").match(/VmHWM:\s+(\d+)/);
console.log(JSON.stringify({
  batch: B, prompt_tokens: P,
  prefill_tokens_per_s: (B * P) / Math.max(1e-9, r.prefill_s),
  decode_tokens_per_s: r.decodeTokens / Math.max(1e-9, r.decode_s),
  decode_tokens: r.decodeTokens, generated_ids: r.out, stop_reasons: r.reasons,
  peak_memory_bytes: hwm ? Number(hwm[1]) * 1024 : 0, threads: context.currentThreads,
  flash_attention: context.flashAttention, kv_type: kvType,
}));
await context.dispose();
await model.dispose();
await llama.dispose();
