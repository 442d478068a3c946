// Speculative decoding in llama.cpp through node-llama-cpp 3.21.1 (a
// benchmark aid only), beside `batchd bench engine --speculative`: greedy
// decoding of N tokens (EOS ignored) of one sequence with no token
// predictor, with prompt lookup (InputLookupTokenPredictor) and with the
// model drafting for itself (DraftSequenceTokenPredictor on a second
// context of the same model), the cases alternated round by round.
// Completion tokens per second end to end (short prompts), as batchd's
// bench reports them.
//
// usage: node spec.mjs MODEL.gguf [rounds=3] [threads=2] [tokens=200] [cases=off,ngram,draft]
import {getLlama, InputLookupTokenPredictor, DraftSequenceTokenPredictor} from "node-llama-cpp";
import os from "node:os";

const [modelPath, roundsArg, threadsArg, tokensArg, casesArg] = process.argv.slice(2);
const rounds = Number(roundsArg ?? 3), threads = Number(threadsArg ?? 2), N = Number(tokensArg ?? 200);
const cases = (casesArg ?? "off,ngram,draft").split(",");
// The prompts of batchd's repetitive workload (engine/native/nativebench/spec.go).
const prompts = [
    "The ball was red. The ball was big. The ball",
    "He wanted to play with his toys. He wanted to play with his toys.",
    "\"Can I play with you?\" \"Yes, you can play with me.\" \"Can I play",
    "She was very happy. She was very happy. She",
    "The sun was hot. The sun was big. The sun",
    "Anna and Ben are friends. They like to play with their toys.",
    "They did not want to play with the box. They did not",
    "Tom and Sam were friends. Tom said to Sam, \"Sam, let's play.\" Sam said to Tom,",
];
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const now = () => Number(process.hrtime.bigint()) / 1e9;

const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, maxThreads: threads, logLevel: "warn"});
console.log("llama.cpp release:", JSON.stringify(llama.llamaCppRelease), "system info:", llama.systemInfo);
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const ctxSize = 1024;
async function run(c, prompt) {
    const ctx = await model.createContext({sequences: 1, contextSize: ctxSize, threads});
    let tokenPredictor, draftCtx;
    if (c === "ngram") tokenPredictor = new InputLookupTokenPredictor({patternLength: {min: 1, max: 3}, predictionLength: {max: 4}});
    if (c === "draft") draftCtx = await model.createContext({sequences: 1, contextSize: ctxSize, threads});
    if (c === "draft") tokenPredictor = new DraftSequenceTokenPredictor(draftCtx.getSequence(), {maxTokens: 4});
    const seq = ctx.getSequence({tokenPredictor});
    const t0 = now();
    let n = 0;
    for await (const _ of seq.evaluate(model.tokenize(prompt), {temperature: 0})) {
        if (++n >= N) break;
    }
    const secs = now() - t0;
    const p = seq.tokenPredictions;
    seq.dispose();
    await ctx.dispose();
    if (draftCtx) await draftCtx.dispose();
    return {tps: n / secs, p};
}
const R = Object.fromEntries(cases.map((c) => [c, {tps: [], validated: 0, refuted: 0}]));
await run(cases[0], prompts[0]); // warm-up
for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < cases.length; k++) {
        const c = cases[(k + r) % cases.length];
        let toks = 0, secs = 0;
        for (const pr of prompts) {
            const x = await run(c, pr);
            toks += N; secs += N / x.tps;
            R[c].validated += x.p.validated; R[c].refuted += x.p.refuted;
        }
        R[c].tps.push(toks / secs);
    }
    console.log(`round ${r + 1} done, load ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`);
}
const base = median(R[cases[0]].tps);
for (const c of cases) {
    const x = R[c], m = median(x.tps);
    const acc = x.validated + x.refuted ? ` acceptance ${(100 * x.validated / (x.validated + x.refuted)).toFixed(1)}% (${x.validated} of ${x.validated + x.refuted})` : "";
    console.log(`x1 ${c.padEnd(6)} ${m.toFixed(1)} tok/s (${(m / base).toFixed(2)}x) [${Math.min(...x.tps).toFixed(1)}-${Math.max(...x.tps).toFixed(1)}]${acc}`);
}
