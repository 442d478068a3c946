// Package openai is the engine for any OpenAI-compatible server (vLLM,
// SGLang, llama.cpp server): it turns each engine.Request into an HTTP POST
// to one of the configured replicas and maps the answer back to an
// engine.Response.
//
// It owns: replica choice (fewest attempts in flight, round robin on ties),
// the in-flight window shared by all replicas, retries with capped and
// jittered backoff (go-retryablehttp underneath), per-attempt timeouts, and
// outage handling: when every attempt fails for a while the engine pauses,
// holds its callers and probes GET {base}/models until a replica answers,
// instead of failing every request of every batch. Failures end a request
// only when they are its own (see Config.MaxRetries): shown by other
// requests the replica served meanwhile, or, when it serves none (the last
// requests of a batch all failing), by a health check shared by those
// requests that re-sends an earlier request that succeeded (healthcheck.go). A watchdog reports the engine hung while requests get
// no response byte (see Config.HangAfter).
//
// It implements engine.Engine and engine.StatsReporter. It must import only
// engine and wire from batchd: never pipeline, daemon or watcher.
package openai
