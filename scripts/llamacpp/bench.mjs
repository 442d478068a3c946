// Raw llama_decode timing through node-llama-cpp 3.21.1's prebuilt addon,
// the same method as llama.cpp's llama-batched-bench and `batchd bench engine`:
// no sampling, logits computed for the last token of each sequence.
//  - prefill: one sequence, 256-token prompt in one llama_decode (n_batch 512)
//  - decode xN: N sequences, each after a 32-token prompt (not timed),
//    32 steps of one llama_decode holding one token per sequence
//  - decode x1 after 256: one sequence after the 256-token prompt, 32 steps
//
// usage: node bench.mjs MODEL.gguf [reps=3] [threads=2] (scripts/llamacpp/compare.sh runs it)
// LORA=ADAPTER.gguf applies that LoRA adapter to every sequence
// (scripts/llamacpp/compare-lora.sh runs it so).
import {getLlama} from "node-llama-cpp";
import os from "node:os";

const modelPath = process.argv[2];
const reps = Number(process.argv[3] ?? 3);
const threads = Number(process.argv[4] ?? 2);
const PROMPT = 256, SHORT = 32, STEPS = 32, SEQS = [1, 8, 32];

const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const now = () => Number(process.hrtime.bigint()) / 1e9;
const load = () => os.loadavg().map((x) => x.toFixed(2)).join(" ");

const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: threads, logLevel: process.env.NLC_LOG ?? "warn"
});
console.log("llama.cpp release:", JSON.stringify(llama.llamaCppRelease), "build:", llama.buildType);
console.log("system info:", llama.systemInfo);
let t = now();
const model = await llama.loadModel({modelPath, gpuLayers: 0});
console.log(`loaded ${modelPath} in ${(now() - t).toFixed(2)} s`);
// The model's vocabulary (stories260K has 512 tokens), as batchd's bench takes it.
const meta = model.fileInfo.metadata;
const vocab = meta[meta.general?.architecture]?.vocab_size ?? meta.tokenizer?.ggml?.tokens?.length ?? 151936;
const tok = (i) => (i * 7919 + 13) % vocab; // batchd bench's synthetic ids
const toks = (first, n) => Uint32Array.from({length: n}, (_, i) => tok(first + i));

async function decode(raw, items) {
    // items: [{seq, pos, tokens}] -> one llama_decode, logits for each item's last token
    raw.initBatch(items.reduce((a, x) => a + x.tokens.length, 0));
    for (const x of items) raw.addToBatch(x.seq, x.pos, x.tokens, Uint32Array.of(x.tokens.length - 1));
    await raw.decodeBatch();
}

const lora = process.env.LORA ? {lora: {adapters: [{filePath: process.env.LORA, scale: 1}]}} : {};
if (process.env.LORA) console.log("lora adapter:", process.env.LORA);
const R = {prefill: [], decode256: [], decode: Object.fromEntries(SEQS.map((n) => [n, []]))};
{
    const ctx = await model.createContext({sequences: 1, contextSize: 512, batchSize: 512, threads, ...lora});
    const raw = ctx._ctx;
    raw.setThreads(threads);
    console.log(`context: n_ctx ${ctx.contextSize}/seq, batch ${ctx.batchSize}, threads ${raw.getThreads()}, flashAttention ${ctx.flashAttention}`);
    await decode(raw, [{seq: 0, pos: 0, tokens: toks(0, 16)}]); // warm-up
    raw.disposeSequence(0);
    for (let r = 0; r < reps; r++) {
        let t0 = now();
        await decode(raw, [{seq: 0, pos: 0, tokens: toks(r * 1000, PROMPT)}]);
        const pf = PROMPT / (now() - t0);
        t0 = now();
        for (let s = 0; s < STEPS; s++) await decode(raw, [{seq: 0, pos: PROMPT + s, tokens: toks(r * 1000 + PROMPT + s, 1)}]);
        const dc = STEPS / (now() - t0);
        raw.disposeSequence(0);
        R.prefill.push(pf); R.decode256.push(dc);
        console.log(`rep ${r}: prefill ${PROMPT}: ${pf.toFixed(1)} tok/s; decode x1 after ${PROMPT}: ${dc.toFixed(1)} tok/s  [load ${load()}]`);
    }
    await ctx.dispose();
}
for (const n of SEQS) {
    const ctx = await model.createContext({sequences: n, contextSize: 128, batchSize: 512, threads, ...lora});
    const raw = ctx._ctx;
    raw.setThreads(threads);
    for (let r = 0; r < reps; r++) {
        for (let i = 0; i < n; i++) await decode(raw, [{seq: i, pos: 0, tokens: toks(r * 5000 + i * 97, SHORT)}]);
        const t0 = now();
        for (let s = 0; s < STEPS; s++)
            await decode(raw, Array.from({length: n}, (_, i) => ({seq: i, pos: SHORT + s, tokens: toks(r * 5000 + i * 97 + SHORT + s, 1)})));
        const dt = now() - t0;
        for (let i = 0; i < n; i++) raw.disposeSequence(i);
        R.decode[n].push(n * STEPS / dt);
        console.log(`rep ${r}: decode x${n}: ${n * STEPS} tokens in ${dt.toFixed(3)} s = ${(n * STEPS / dt).toFixed(1)} tok/s aggregate  [load ${load()}]`);
    }
    await ctx.dispose();
}
console.log(`SUMMARY-RAW ${modelPath} threads=${threads} reps=${reps}: prefill ${median(R.prefill).toFixed(1)} | decode1(after256) ${median(R.decode256).toFixed(1)} | ` +
    SEQS.map((n) => `decode x${n} ${median(R.decode[n]).toFixed(1)}`).join(" | ") + ` | load ${load()}`);
console.log("peak RSS (MB):", (process.resourceUsage().maxRSS / 1024).toFixed(0));
await model.dispose();
await llama.dispose();
