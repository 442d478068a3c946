// llama.cpp's own KL divergence of quantized files from their reference, the
// figure `llama-perplexity --kl-divergence` prints (node-llama-cpp does not
// ship that tool): every position of one token sequence is run through the
// reference file and through each model file with llama.cpp (node-llama-cpp
// 3.21.1's prebuilt CPU addon, a benchmark aid only), and KL(P_ref || P_model)
// of the next-token distributions is summarised as `batchd bench kl` does
// (mean, p99, max, top-1 agreement), so the two tables sit side by side.
//
// usage: node kl.mjs TOKENS.json REF.gguf MODEL.gguf... (scripts/llamacpp/kl.sh runs it)
// TOKENS.json: the token ids `batchd bench kl --tokens-out` wrote, so both
// engines see the very same sequence. THREADS (default 2) sets the threads.
//
// The probabilities are llama.cpp's sampler output at temperature 1 with
// top-k, top-p and min-p off: softmax of the logits. The script checks that
// each distribution covers the whole vocabulary and sums to 1.
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [tokensPath, refPath, ...models] = process.argv.slice(2);
if (!tokensPath || !refPath || models.length === 0) {
    console.error("usage: node kl.mjs TOKENS.json REF.gguf MODEL.gguf...");
    process.exit(2);
}
const threads = Number(process.env.THREADS ?? 2);
const tokens = JSON.parse(fs.readFileSync(tokensPath, "utf8"));
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    maxThreads: threads, logLevel: process.env.NLC_LOG ?? "warn"
});
console.log("llama.cpp release:", JSON.stringify(llama.llamaCppRelease), "build:", llama.buildType);
console.log("system info:", llama.systemInfo);

// logProbs runs tokens through the file and returns, per position, the
// log-probabilities of the whole vocabulary (Float64Array) and the vocabulary size.
async function logProbs(path) {
    const model = await llama.loadModel({modelPath: path, gpuLayers: 0});
    const ctx = await model.createContext({sequences: 1, contextSize: tokens.length + 16, batchSize: 512, threads});
    const seq = ctx.getSequence();
    const opts = {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}};
    const res = await seq.controlledEvaluate(tokens.map((t) => [t, opts]));
    const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    const rows = res.map((r, pos) => {
        const p = r?.next?.probabilities;
        if (!p) throw new Error(`${path}: no probabilities at position ${pos}`);
        if (p.size !== vocab) throw new Error(`${path}: position ${pos}: ${p.size} probabilities for a ${vocab}-token vocabulary (a sampler cut the distribution)`);
        const row = new Float64Array(vocab).fill(-Infinity);
        let sum = 0;
        for (const [tok, prob] of p) { row[tok] = Math.log(prob); sum += prob; }
        if (Math.abs(sum - 1) > 1e-3) throw new Error(`${path}: position ${pos}: probabilities sum to ${sum}`);
        return row;
    });
    await ctx.dispose();
    await model.dispose();
    return {rows, vocab};
}

const argmax = (r) => { let b = 0; for (let i = 1; i < r.length; i++) if (r[i] > r[b]) b = i; return b; };
const ref = await logProbs(refPath);
console.log(`KL(P_ref || P_model) of the next-token distribution over ${tokens.length} positions, in nats; reference ${refPath}`);
console.log(["model".padEnd(40), "mean KL".padStart(11), "p99 KL".padStart(11), "max KL".padStart(11), "top-1".padStart(9)].join(" "));
for (const path of models) {
    const m = await logProbs(path);
    if (m.vocab !== ref.vocab) throw new Error(`${path}: vocabulary ${m.vocab}, the reference's ${ref.vocab}`);
    const kls = [];
    let agree = 0;
    ref.rows.forEach((p, pos) => {
        const q = m.rows[pos];
        let kl = 0;
        for (let i = 0; i < p.length; i++) if (p[i] > -80) kl += Math.exp(p[i]) * (p[i] - q[i]);
        kls.push(Math.max(kl, 0));
        if (argmax(p) === argmax(q)) agree++;
    });
    const mean = kls.reduce((a, b) => a + b, 0) / kls.length;
    kls.sort((a, b) => a - b);
    const p99 = kls[Math.max(0, Math.ceil(0.99 * kls.length) - 1)];
    const name = path.slice(path.lastIndexOf("/") + 1);
    console.log([name.padEnd(40), mean.toExponential(3).padStart(11), p99.toExponential(3).padStart(11),
        kls[kls.length - 1].toExponential(3).padStart(11), `${(100 * agree / kls.length).toFixed(2)}%`.padStart(9)].join(" "));
}
