package ops

import "sync"

// fakeState is a State whose state tests set directly. If advance is
// non-empty, every Batches call first moves that batch forward by step
// finished requests (up to its total) and by tokensPerStep tokens, as a
// running batch would between two looks.
type fakeState struct {
	mu            sync.Mutex
	batches       []BatchView
	engine        EngineView
	intake        IntakeView
	err           error
	advance       string
	step          int
	tokensPerStep int64
	calls         int
}

var _ State = (*fakeState)(nil)

func (f *fakeState) Batches() ([]BatchView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	for i := range f.batches {
		b := &f.batches[i]
		if b.ID != f.advance {
			continue
		}
		b.Completed = min(b.Total-b.Failed, b.Completed+f.step)
		b.OutputTokens += f.tokensPerStep
	}
	return append([]BatchView(nil), f.batches...), nil
}

func (f *fakeState) Engine() EngineView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engine
}

func (f *fakeState) Intake() IntakeView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.intake
}

func (f *fakeState) set(batches ...BatchView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = batches
}

func (f *fakeState) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}
