package daemon

import (
	"runtime"

	"github.com/batchd/batchd/daemon/ops"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/watcher"
)

// opsState is what the metrics and the status page see of the daemon.
type opsState struct{ d *Daemon }

var _ ops.State = opsState{}

func (s opsState) Batches() ([]ops.BatchView, error) {
	bs, err := s.d.pipe.Ledger().List()
	if err != nil {
		return nil, err
	}
	out := make([]ops.BatchView, 0, len(bs))
	for _, b := range bs {
		o := s.d.batchObject(b)
		v := ops.BatchView{ID: o.ID, Name: b.Name, Status: b.Status, Endpoint: o.Endpoint,
			Total: b.Total, Completed: b.Completed, Failed: b.Failed,
			InputTokens: b.InputTokens, OutputTokens: b.OutputTokens,
			CreatedAt: b.CreatedAt, InProgressAt: b.InProgressAt, Rate: s.d.pipe.Rate(b.Name)}
		for _, t := range []int64{b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt} {
			v.EndedAt = max(v.EndedAt, t)
		}
		out = append(out, v)
	}
	return out, nil
}

func (s opsState) Engine() ops.EngineView {
	ds := s.d.pipe.Dispatch()
	v := ops.EngineView{Name: s.d.cfg.Engine, PrefixCacheHitRate: -1, Queued: s.d.queued(),
		Dispatch: ops.DispatchView{InFlight: ds.InFlight, Waiting: ds.Waiting, Window: ds.Window}}
	if sr, ok := s.d.eng.(engine.StatsReporter); ok {
		st := sr.Stats()
		v.InFlight, v.Paused, v.Hung, v.Retries = st.InFlight, st.Paused, st.Hung, st.Retries
	}
	if ne, ok := s.d.eng.(*native.Engine); ok {
		cs := ne.CacheStats()
		if cs.PromptTokens > 0 {
			v.PrefixCacheHitRate = cs.HitRate()
		}
		v.Kernels = ops.KernelsView{Backend: ne.Kernels(), Arch: runtime.GOARCH, Features: kernels.Features()}
		v.KVBytesTotal = cs.BudgetBytes
		for _, s := range ne.SpecStats() {
			v.Spec = append(v.Spec, ops.SpecView{Model: s.Model, DraftTokens: s.DraftTokens, Accepted: s.AcceptedTokens})
		}
		if cs.Blocks > 0 {
			v.KVBytesUsed = cs.BudgetBytes / int64(cs.Blocks) * int64(cs.BlocksUsed)
		}
	}
	return v
}

func (s opsState) Intake() ops.IntakeView {
	st := s.d.pipe.DiskState()
	v := ops.IntakeView{DiskFull: st.Full, DiskFullPauses: st.Pauses, InboxWaiting: s.d.inboxWaiting()}
	if st.Full {
		v.DiskFullSince = st.Since.Unix()
	}
	if b := s.d.bodies; b != nil {
		v.Uploads, v.UploadsRefused, v.BodiesTooSlow = len(b.uploads), b.refused.Load(), b.tooSlow.Load()
	}
	return v
}

// queued is how many inputs wait for a batch runner.
func (d *Daemon) queued() int {
	queued, _ := d.runs.snapshot()
	return len(queued)
}

// inboxWaiting is batchd_inbox_waiting by source (ops.IntakeView): the
// inputs queued here for a batch runner, and for a bucket its listing.
func (d *Daemon) inboxWaiting() map[string]int {
	out := map[string]int{"api": 0}
	if d.bucket != nil {
		if n := d.bucket.w.Inputs(); n >= 0 {
			out["bucket"] = n
		}
	} else {
		out["dir"] = 0
	}
	queued, _ := d.runs.snapshot()
	for _, dl := range queued {
		if dl.ev.Kind != watcher.Input {
			continue
		}
		// A bucket's waiting inputs are its listing's, counted above.
		if kind := dl.src.kind(); kind != "bucket" {
			out[kind]++
		}
	}
	return out
}
