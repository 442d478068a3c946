// Drives batchd's /v1/messages with the official Anthropic npm SDK,
// unchanged: a message, a streamed message, and the errors its users
// catch. Run by daemon's TestAnthropicNodeSDK with ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY set (the SDK sends the key as x-api-key).
import Anthropic from "@anthropic-ai/sdk";

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
}

const client = new Anthropic({ maxRetries: 0 });
const ask = {
  model: "m",
  max_tokens: 8,
  system: "Answer briefly.",
  messages: [{ role: "user", content: [{ type: "text", text: "hello from the anthropic sdk" }] }],
  stop_sequences: ["never-said"],
};

const msg = await client.messages.create(ask);
check(msg.type === "message" && msg.role === "assistant" && msg.id, "a message", msg);
check(msg.content.length === 1 && msg.content[0].type === "text" && msg.content[0].text.length > 0, "one text block", msg.content);
check(["end_turn", "max_tokens", "stop_sequence"].includes(msg.stop_reason), "stop_reason", msg.stop_reason);
check(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0, "usage", msg.usage);

const stream = client.messages.stream(ask);
let streamed = "";
stream.on("text", (t) => { streamed += t; });
const final = await stream.finalMessage();
check(final.content[0].text === streamed && streamed === msg.content[0].text, "the stream's text is the message's", { streamed, final, msg });
check(final.stop_reason === msg.stop_reason && final.usage.output_tokens === msg.usage.output_tokens, "the stream's end", final);

try {
  await client.messages.create({ model: "m", messages: ask.messages });
  check(false, "a request without max_tokens is refused", "it ran");
} catch (err) {
  check(err instanceof Anthropic.BadRequestError && err.error?.type === "error" &&
    err.error?.error?.type === "invalid_request_error" && /max_tokens/.test(err.error?.error?.message), "400 naming max_tokens", err.error ?? String(err));
}

try {
  await new Anthropic({ apiKey: "not-the-key", maxRetries: 0 }).messages.create(ask);
  check(false, "a wrong key is refused", "it ran");
} catch (err) {
  check(err instanceof Anthropic.AuthenticationError && err.error?.error?.type === "authentication_error", "401 authentication_error", err.error ?? String(err));
}

console.log(`anthropic sdk ok: ${JSON.stringify(msg.content[0].text)} (${msg.stop_reason}, ${msg.usage.input_tokens}+${msg.usage.output_tokens} tokens)`);
