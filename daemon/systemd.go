package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batchd/batchd/internal/sdnotify"
	"github.com/batchd/batchd/pipeline/ledger"
)

// The daemon's side of systemd's notification protocol (Type=notify): READY=1
// at the end of Open, STATUS= with the batches running, WATCHDOG=1 while the
// daemon's coordination is alive, STOPPING=1 as Close begins. Without
// NOTIFY_SOCKET none of it sends anything.

const (
	// statusEvery is how often STATUS is refreshed when nothing pokes it
	// (progress moves without the queue changing).
	statusEvery = 5 * time.Second
	// statusMax bounds a STATUS line: systemctl status shows one line.
	statusMax = 256
)

type systemd struct {
	// n and watchdog are set by notifyReady, before the loop starts;
	// n is nil (sends nothing) until then.
	n        *sdnotify.Notifier
	watchdog time.Duration // 0: no watchdog
	poke     chan struct{} // a change in the queue: refresh STATUS now
	stopping sync.Once
}

func newSystemd() *systemd { return &systemd{poke: make(chan struct{}, 1)} }

// openSystemd reads NOTIFY_SOCKET and WATCHDOG_USEC. A value it cannot use
// is logged and that part left off: the daemon runs the same without it.
func (d *Daemon) openSystemd() {
	log := d.log.With("component", "systemd")
	sd := d.sd
	n, err := sdnotify.FromEnv(os.Getenv)
	if err != nil {
		log.Warn("not notifying the service manager", "error", err)
		n = &sdnotify.Notifier{}
	}
	sd.n = n
	if n.Enabled() {
		wd, err := sdnotify.WatchdogInterval(os.Getenv, os.Getpid())
		switch {
		case errors.Is(err, sdnotify.ErrOtherPID):
		case err != nil:
			log.Warn("no watchdog pings", "error", err)
		default:
			sd.watchdog = wd
		}
	}
}

// notifyReady tells the service manager the daemon is ready (Open's end:
// ledger open, engine loaded, sources listening, HTTP serving) and starts
// the STATUS and watchdog loop.
func (d *Daemon) notifyReady(ctx context.Context) {
	d.openSystemd()
	if !d.sd.n.Enabled() {
		return
	}
	d.sdSend("READY=1")
	d.wg.Add(1)
	go d.systemdLoop(ctx)
}

// notifyStopping sends STOPPING=1, once, as shutdown begins.
func (d *Daemon) notifyStopping() {
	d.sd.stopping.Do(func() { d.sdSend("STOPPING=1") })
}

// pokeStatus asks for a STATUS refresh; it never blocks.
func (d *Daemon) pokeStatus() {
	select {
	case d.sd.poke <- struct{}{}:
	default:
	}
}

func (d *Daemon) sdSend(state string) {
	if err := d.sd.n.Send(state); err != nil {
		d.log.Warn("notify the service manager", "component", "systemd", "error", err)
	}
}

// systemdLoop refreshes STATUS when the queue changes and every statusEvery,
// and pets the watchdog every half interval.
//
// Why the watchdog is tied to statusLine: a timer alone would keep petting
// while the daemon is wedged. statusLine goes through what every source and
// batch runner goes through: it takes the daemon's queue lock (a deadlock
// there stops all intake and every runner) and reads the ledger (bbolt's
// locks, which a writer wedged while growing the file holds). WATCHDOG=1 is
// sent only after it returned without error, so a daemon stuck there stops
// petting and systemd restarts it; the ledger makes the restart lose
// nothing. A batch that is merely slow still pets: a hung remote engine is
// what /readyz and the engine's own timeouts report, and a restart would
// not cure it.
func (d *Daemon) systemdLoop(ctx context.Context) {
	defer d.wg.Done()
	status := time.NewTicker(statusEvery)
	defer status.Stop()
	var pet <-chan time.Time
	if d.sd.watchdog > 0 {
		t := time.NewTicker(d.sd.watchdog / 2)
		defer t.Stop()
		pet = t.C
	}
	last := ""
	for first := true; ; first = false {
		petNow := false
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-status.C:
			case <-d.sd.poke:
			case <-pet:
				petNow = true
			}
		}
		line, err := d.statusLine()
		if err != nil {
			d.log.Warn("daemon status for the service manager", "component", "systemd", "error", err)
			continue
		}
		if line != last {
			d.sdSend(sdnotify.Status(line, statusMax))
			last = line
		}
		if petNow || (first && d.sd.watchdog > 0) {
			d.sdSend("WATCHDOG=1")
		}
	}
}

// statusLine says what runs and what waits, e.g.
// "2 batches running: a 120/500, b 0/10; 3 queued".
func (d *Daemon) statusLine() (string, error) {
	queued, running := d.runs.snapshot()
	var parts []string
	for _, name := range running {
		b, err := d.pipe.Ledger().ByName(name)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			parts = append(parts, name+" starting")
		case err != nil:
			return "", fmt.Errorf("read the ledger: %w", err)
		default:
			parts = append(parts, fmt.Sprintf("%s %d/%d", name, b.Completed+b.Failed, b.Total))
		}
	}
	head := "no batches running"
	switch len(running) {
	case 0:
	case 1:
		head = "1 batch running"
	default:
		head = fmt.Sprintf("%d batches running", len(running))
	}
	tail := fmt.Sprintf("; %d queued", len(queued))
	if d.pipe.DiskState().Full {
		tail += "; paused: disk full"
	}
	// The counts always show; the per-batch list is cut to fit statusMax.
	var s strings.Builder
	s.WriteString(head)
	for i, p := range parts {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		more := fmt.Sprintf(", +%d more", len(parts)-i)
		if s.Len()+len(sep)+len(p)+len(more)+len(tail) > statusMax && i < len(parts)-1 ||
			s.Len()+len(sep)+len(p)+len(tail) > statusMax {
			if i == 0 {
				more = fmt.Sprintf(": %d not shown", len(parts))
			}
			s.WriteString(more)
			break
		}
		s.WriteString(sep + p)
	}
	s.WriteString(tail)
	return s.String(), nil
}
