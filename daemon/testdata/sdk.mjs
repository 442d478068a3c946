// The official openai npm SDK against batchd's API, unchanged but for the
// base URL: upload, create a batch, poll it, download output and errors,
// check every custom_id once; cancel a second batch and check its
// batch_cancelled lines; a /v1/responses batch and client.responses.create, whole and streamed;
// a missing key gets 401.
//
// usage: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=KEY node sdk.mjs N_LINES SLOW_LINES
import OpenAI, { toFile } from "openai";

const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };
const client = new OpenAI();
const n = Number(process.argv[2] ?? 20), slowN = Number(process.argv[3] ?? 400);

function batchFile(tag, count) {
  const lines = [];
  for (let i = 0; i < count; i++) {
    lines.push(JSON.stringify({ custom_id: `${tag}-${i}`, method: "POST", url: "/v1/chat/completions",
      body: { model: "m", messages: [{ role: "user", content: `${tag} ${i}` }], max_tokens: 5 } }));
  }
  return lines.join("\n") + "\n";
}

async function waitEnd(id) {
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (["completed", "failed", "expired", "cancelled"].includes(b.status)) return b;
    await new Promise((r) => setTimeout(r, 50)); // polling, as SDK users do
  }
}

async function lines(fileId) {
  if (!fileId) return [];
  const resp = await client.files.content(fileId);
  const text = await resp.text();
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
}

// 1. A whole batch.
const file = await client.files.create({ file: await toFile(Buffer.from(batchFile("sdk", n)), "sdk.jsonl"), purpose: "batch" });
if (file.purpose !== "batch" || !file.id) fail("file object " + JSON.stringify(file));
const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h",
  metadata: { suite: "sdk" } });
const done = await waitEnd(batch.id);
if (done.status !== "completed") fail("batch ended " + done.status);
if (done.request_counts.total !== n || done.request_counts.completed !== n) fail("counts " + JSON.stringify(done.request_counts));
const out = await lines(done.output_file_id), errs = await lines(done.error_file_id);
const seen = new Map();
for (const l of [...out, ...errs]) seen.set(l.custom_id, (seen.get(l.custom_id) ?? 0) + 1);
for (let i = 0; i < n; i++) if (seen.get(`sdk-${i}`) !== 1) fail(`sdk-${i} appears ${seen.get(`sdk-${i}`) ?? 0} times`);
if (out[0].response.status_code !== 200 || out[0].response.body.object !== "chat.completion") fail("output line " + JSON.stringify(out[0]));
const listed = [];
for await (const b of client.batches.list({ limit: 1 })) listed.push(b.id);
if (!listed.includes(batch.id)) fail("batch not listed");

// 2. Cancel a slow batch.
const slowFile = await client.files.create({ file: await toFile(Buffer.from(batchFile("slow", slowN)), "slow.jsonl"), purpose: "batch" });
const slow = await client.batches.create({ input_file_id: slowFile.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
const c = await client.batches.cancel(slow.id);
if (!["cancelling", "cancelled"].includes(c.status)) fail("cancel returned " + c.status);
const slowEnd = await waitEnd(slow.id);
if (slowEnd.status !== "cancelled") fail("slow batch ended " + slowEnd.status);
const sOut = await lines(slowEnd.output_file_id), sErr = await lines(slowEnd.error_file_id);
if (sOut.length + sErr.length !== slowN) fail(`cancelled batch has ${sOut.length}+${sErr.length} lines, want ${slowN}`);
const cancelled = sErr.filter((l) => l.error && l.error.code === "batch_cancelled");
if (cancelled.length === 0) fail("no batch_cancelled lines");

// 3. A Responses batch, and client.responses.create online.
const rLines = [];
for (let i = 0; i < 3; i++) {
  rLines.push(JSON.stringify({ custom_id: `resp-${i}`, method: "POST", url: "/v1/responses",
    body: { model: "m", instructions: "Answer briefly.", store: false, max_output_tokens: 5,
      input: [{ role: "user", content: [{ type: "input_text", text: `resp ${i}` }] }] } }));
}
const rFile = await client.files.create({ file: await toFile(Buffer.from(rLines.join("\n") + "\n"), "resp.jsonl"), purpose: "batch" });
const rBatch = await client.batches.create({ input_file_id: rFile.id, endpoint: "/v1/responses", completion_window: "24h" });
const rDone = await waitEnd(rBatch.id);
if (rDone.status !== "completed" || rDone.request_counts.completed !== 3) fail("responses batch " + JSON.stringify(rDone));
for (const l of await lines(rDone.output_file_id)) {
  const b = l.response.body;
  if (b.object !== "response" || !["completed", "incomplete"].includes(b.status) || b.output[0].type !== "message" ||
    b.output[0].content[0].type !== "output_text" || typeof b.usage.input_tokens !== "number") fail("responses line " + JSON.stringify(l));
}
if (!(rDone.usage.input_tokens > 0)) fail("responses batch usage " + JSON.stringify(rDone.usage));
const online = await client.responses.create({ model: "m", input: "hello online", max_output_tokens: 5, store: false });
if (online.object !== "response" || typeof online.output_text !== "string" || online.output_text === "" ||
  online.usage.output_tokens < 1) fail("responses.create " + JSON.stringify(online));
// Streamed: the deltas join to the final Response's text, in both the
// raw events and the SDK's accumulating helper.
const events = await client.responses.create({ model: "m", input: "hello stream", max_output_tokens: 5, store: false, stream: true });
let joined = "", last = null;
for await (const ev of events) {
  if (ev.type === "response.output_text.delta") joined += ev.delta;
  last = ev;
}
if (last?.type !== "response.completed" && last?.type !== "response.incomplete") fail("stream ended with " + JSON.stringify(last));
const lastText = last.response.output[0].content[0].text;
if (joined === "" || joined !== lastText) fail(`streamed ${JSON.stringify(joined)}, final ${JSON.stringify(lastText)}`);
const helper = client.responses.stream({ model: "m", input: "hello helper", max_output_tokens: 5, store: false });
let helped = "";
helper.on("response.output_text.delta", (ev) => { helped += ev.delta; });
const helperFinal = await helper.finalResponse();
if (helped === "" || helped !== helperFinal.output_text) fail(`stream helper ${JSON.stringify(helped)}, final ${JSON.stringify(helperFinal.output_text)}`);
try {
  await client.responses.create({ model: "m", input: "x", previous_response_id: "resp_1", store: false });
  fail("previous_response_id was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.param !== "previous_response_id") fail("previous_response_id: " + e);
}

// 3b. Expiry, as the SDK sends it: expires_after[anchor] and
// expires_after[seconds] form fields, output_expires_after in the body.
const exp = await client.files.create({ file: await toFile(Buffer.from(batchFile("exp", 1)), "exp.jsonl"), purpose: "batch",
  expires_after: { anchor: "created_at", seconds: 3600 } });
if (exp.expires_at !== exp.created_at + 3600) fail("expiring file " + JSON.stringify(exp));
if (file.expires_at !== null) fail("a file without expires_after: expires_at " + file.expires_at);
const expBatch = await client.batches.create({ input_file_id: exp.id, endpoint: "/v1/chat/completions", completion_window: "24h",
  output_expires_after: { anchor: "created_at", seconds: 7200 } });
const expEnd = await waitEnd(expBatch.id);
const expOut = await client.files.retrieve(expEnd.output_file_id);
if (typeof expOut.expires_at !== "number" || expOut.expires_at < expEnd.created_at + 7200) fail("expiring output " + JSON.stringify(expOut));
try {
  await client.batches.create({ input_file_id: exp.id, endpoint: "/v1/chat/completions", completion_window: "24h",
    output_expires_after: { anchor: "created_at", seconds: 60 } });
  fail("output_expires_after of 60 seconds was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.param !== "output_expires_after.seconds") fail("short expiry: " + e);
}

// 4. No key: 401.
const anon = new OpenAI({ apiKey: "wrong-key" });
try {
  await anon.batches.list();
  fail("a wrong key was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.AuthenticationError) || e.status !== 401) fail("wrong key: " + e);
}
console.log(`OK: ${n} requests once each; cancelled batch: ${sOut.length} done, ${cancelled.length} batch_cancelled`);
