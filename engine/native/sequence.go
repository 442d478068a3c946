package native

import (
	"strings"
	"sync/atomic"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/tokenizer"
)

// seqStatus is where a sequence is in the scheduler (scheduler.go).
type seqStatus uint8

const (
	// seqWaiting: queued, never admitted.
	seqWaiting seqStatus = iota
	// seqRunning: admitted, holding KV blocks, in the running set.
	seqRunning
	// seqPreempted: back in the queue after running; its blocks were freed
	// and its prompt and generated tokens are recomputed when it returns.
	seqPreempted
	// seqFinished: done (finish says why), cancelled or failed.
	seqFinished
)

// seq is one sequence being generated: one choice of a request.
type seq struct {
	job       *job
	index     int     // choice index
	tokens    []int32 // prompt then generated tokens
	promptLen int
	dec       *tokenizer.Decoder
	text      strings.Builder
	status    seqStatus
	finish    string       // the finish_reason once finished: stop, length, error
	stopStr   *string      // the stop string that ended it (stop_reason); nil otherwise
	streamed  int          // bytes of text streamed (emit)
	samp      *seqSampling // penalties and logprobs (sampler.go)
	adapter   *adapter     // the LoRA adapter it runs with; nil: the base model

	// KV cache and scheduling state (scheduler.go, block_manager.go).
	blocks     []int32     // block table
	n          int         // positions whose K/V are in blocks
	hashes     []blockHash // chained hashes of tokens' first full blocks, computed on demand
	registered int         // leading blocks entered in the prefix cache
	cached     int         // prompt tokens found in the prefix cache at first admission
	chunk      int         // its tokens in the step being planned or run; 0: not in it
	// draft is the drafts this step verifies after its last token (chunk
	// is then 1+len(draft)); nil: none (speculative.go).
	draft     []int32
	spec      specState
	waitSteps int // steps spent waiting since it arrived (orderWaiting)
	order     int // orderWaiting's sort key for this step
}

// finished says whether s is done.
func (s *seq) finished() bool { return s.status == seqFinished }

// sampled says whether the step being planned or run computes s's last
// token, and so samples s's next token(s).
func (s *seq) sampled() bool { return s.n+s.chunk-len(s.draft) == len(s.tokens) }

// end finishes s for reason.
func (s *seq) end(reason string) {
	s.status, s.finish = seqFinished, reason
}

// hashAt is the chained hash of s's full block bi.
func (s *seq) hashAt(bi, bs int) blockHash {
	for len(s.hashes) <= bi {
		i := len(s.hashes)
		var parent blockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		// The adapter is part of the key: its K/V differ from the base
		// model's for the same tokens.
		s.hashes = append(s.hashes, chainHash(parent, s.adapterName(), s.tokens[i*bs:(i+1)*bs]))
	}
	return s.hashes[bi]
}

// adapterName is the name of s's adapter ("": the base model), part of
// its blocks' prefix-cache keys.
func (s *seq) adapterName() string {
	if s.adapter == nil {
		return ""
	}
	return s.adapter.name
}

// job is one request: its sequences and where its result goes.
type job struct {
	p         *params
	seqs      []*seq
	remaining int // sequences not yet retired (scheduler goroutine only)
	cancelled atomic.Bool
	// stream, when set, gets each sequence's new text as it is decided
	// (engine.Request.Stream).
	stream func(choice int, delta string)
	// suspect: the job was in a step that panicked with other jobs, so it
	// runs alone until it ends (fault.go). Scheduler goroutine only.
	suspect bool
	// failed is set, before complete is called, when the engine failed the
	// job.
	failed *engine.Response
	// complete is called once, on the scheduler goroutine, when the job's
	// last sequence retires or the job fails.
	complete func(*job)
	// onStart (engine.Request.Started) is called once, when the first of
	// the job's sequences is admitted to a step; started records that it
	// was. Scheduler goroutine only.
	onStart func()
	started bool
	// prio is engine.Request.Priority: the order of admission
	// (orderWaiting).
	prio engine.Priority
}

// start notes that one of j's sequences enters a step.
func (j *job) start() {
	if !j.started {
		j.started = true
		if j.onStart != nil {
			j.onStart()
		}
	}
}

// retireSeq counts one of j's sequences out, completing j after the last.
func (j *job) retireSeq() {
	j.remaining--
	if j.remaining == 0 && j.complete != nil {
		j.complete(j)
	}
}

// stopReason is s's choice's stop_reason: the stop string that ended it,
// or nil (left out) when none did, as vLLM reports it for an end of
// sequence.
func (s *seq) stopReason() any {
	if s.stopStr == nil {
		return nil
	}
	return *s.stopStr
}
