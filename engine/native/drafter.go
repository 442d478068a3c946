package native

// A drafter proposes tokens that may follow a sequence, for the target
// model to verify in one forward pass (speculative decoding). Drafts are
// deterministic: verification samples each position exactly as plain
// decoding would (same logits, same position-keyed draw), keeps the drafts
// up to the first one that differs from the target's own token, and so
// gives the same output as decoding without speculation.
//
// A drafter is used by its runner's loop goroutine only.
type drafter interface {
	// propose returns up to k[i] draft tokens to follow seqs[i].tokens
	// (fewer or none when it has no good guess). It may keep state per
	// sequence, and must not assume its last drafts were accepted: the
	// sequence's tokens say what was.
	propose(seqs []*seq, k []int) [][]int32
	// release forgets s: it finished, was preempted or was cancelled.
	release(s *seq)
}
