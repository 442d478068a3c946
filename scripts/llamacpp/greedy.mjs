// llama.cpp's greedy continuations and first next-token distributions of
// token-id prompts, for the native engine's family tests to compare with
// (engine/native/family_test.go; node-llama-cpp 3.21.1's prebuilt CPU
// addon, a test aid only).
//
// usage: node greedy.mjs MODEL.gguf PROMPTS.json N > OUT.json
// PROMPTS.json: [[id, ...], ...]. OUT.json: [{"tokens": [N greedy ids],
// "logprobs": {id: log p, ...}}, ...], logprobs being every token's
// log-probability after the prompt (temperature 1, no top-k/top-p/min-p:
// the softmax of llama.cpp's logits). End-of-generation tokens are yielded
// and generation goes on past them, as batchd's greedy test runs.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, promptsPath, nArg] = process.argv.slice(2);
const n = Number(nArg ?? 8);
const prompts = JSON.parse(fs.readFileSync(promptsPath, "utf8"));
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: Number(process.env.THREADS ?? 2), logLevel: process.env.NLC_LOG ?? "error"
});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const out = [];
for (const prompt of prompts) {
    const ctx = await model.createContext({sequences: 1, contextSize: prompt.length + n + 16, batchSize: 512});
    const seq = ctx.getSequence();
    const full = {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}};
    const res = await seq.controlledEvaluate(prompt.map((t, i) => i === prompt.length - 1 ? [t, full] : t));
    const logprobs = {};
    for (const [tok, p] of res[prompt.length - 1].next.probabilities) logprobs[tok] = Math.log(p);
    await ctx.dispose();
    const ctx2 = await model.createContext({sequences: 1, contextSize: prompt.length + n + 16, batchSize: 512});
    const seq2 = ctx2.getSequence();
    const tokens = [];
    for await (const t of seq2.evaluate(prompt, {temperature: 0, yieldEogToken: true})) {
        tokens.push(t);
        if (tokens.length >= n) break;
    }
    await ctx2.dispose();
    out.push({tokens, logprobs});
}
process.stdout.write(JSON.stringify(out));
await model.dispose();
