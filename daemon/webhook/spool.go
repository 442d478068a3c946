package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/internal/fsx"
)

// The spool holds one file per undelivered event, ID.json, written whole to a
// temporary file (.ID.json-*.tmp), fsynced, renamed into place and the folder
// fsynced, so a crash leaves either the old or the new file.
const (
	spoolExt      = ".json"
	tmpExt        = ".tmp"
	corruptExt    = ".corrupt" // a file that could not be read, moved aside
	spoolVersion  = 1
	spoolDirPerm  = 0o755
	maxSpoolBytes = 1 << 20 // far above any real event file
)

// spoolRecord is the content of a spool file.
type spoolRecord struct {
	Version   int      `json:"version"`
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	Batch     string   `json:"batch"`
	CreatedAt int64    `json:"created_at"`
	Body      string   `json:"body"`    // the exact bytes sent on every attempt
	Pending   []string `json:"pending"` // URLs not yet delivered or given up on
}

func (s *Sender) eventPath(id string) string {
	return filepath.Join(s.cfg.SpoolDir, id+spoolExt)
}

// writeEvent replaces ev's spool file with its current state. The caller
// holds ev.mu or has not shared ev yet.
func (s *Sender) writeEvent(ev *event) error {
	data, err := json.Marshal(spoolRecord{
		Version: spoolVersion, ID: ev.id, Type: ev.typ, Batch: ev.batch,
		CreatedAt: ev.created.Unix(), Body: string(ev.body), Pending: ev.pending,
	})
	if err != nil {
		return fmt.Errorf("webhook: encode spool record: %w", err)
	}
	// fsx.WriteFile's temporary names (".ID.json-*.tmp") are what loadSpool
	// cleans up after a crash.
	if err := fsx.WriteFile(s.eventPath(ev.id), data, true); err != nil {
		return fmt.Errorf("webhook: write spool file: %w", err)
	}
	return nil
}

// removeEvent deletes an event's spool file, durably.
func (s *Sender) removeEvent(id string) error {
	if err := os.Remove(s.eventPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("webhook: remove spool file: %w", err)
	}
	return s.syncDir()
}

func (s *Sender) syncDir() error {
	if err := fsx.SyncDir(s.cfg.SpoolDir); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

// loadSpool creates the spool folder if needed (a link there is refused)
// and reads the events in it.
// Leftover temporary files are removed; an unreadable file is logged and
// moved aside (NAME.corrupt), not fatal. URLs no longer configured are
// dropped with a warning.
func (s *Sender) loadSpool(ctx context.Context) ([]*event, error) {
	dir := s.cfg.SpoolDir
	// A link at the folder would send every event outside DATA.
	if err := fsx.NoLink(dir); err != nil {
		return nil, fmt.Errorf("webhook: spool dir: %w", err)
	}
	if err := os.MkdirAll(dir, spoolDirPerm); err != nil {
		return nil, fmt.Errorf("webhook: create spool dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("webhook: read spool dir: %w", err)
	}
	var events []*event
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("webhook: load spool: %w", err)
		}
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case !e.Type().IsRegular():
			continue
		case strings.HasPrefix(name, ".") && strings.HasSuffix(name, tmpExt):
			// A write that a crash interrupted; the renamed file, if any, is whole.
			if err := os.Remove(path); err != nil {
				s.log.Warn("remove leftover spool temp file", keyFile, path, keyError, err)
			}
			continue
		case !strings.HasSuffix(name, spoolExt):
			continue
		}
		ev, err := readEvent(path, strings.TrimSuffix(name, spoolExt))
		if err != nil {
			s.log.Error("unreadable spool file moved aside", keyFile, path, keyError, err)
			if err := os.Rename(path, path+corruptExt); err != nil {
				s.log.Error("move spool file aside", keyFile, path, keyError, err)
			}
			continue
		}
		var kept []string
		for _, u := range ev.pending {
			if slices.Contains(s.cfg.URLs, u) {
				kept = append(kept, u)
			} else {
				s.log.Warn("webhook given up: URL no longer configured", keyEvent, ev.id, keyURL, redact(u))
			}
		}
		ev.pending = kept
		if len(kept) == 0 {
			if err := s.removeEvent(ev.id); err != nil {
				s.log.Error("update spool", keyEvent, ev.id, keyError, err)
			}
			continue
		}
		events = append(events, ev)
	}
	if err := s.syncDir(); err != nil { // the removals and renames above
		return nil, err
	}
	return events, nil
}

// readEvent reads and checks one spool file; id is the name it must carry.
func readEvent(path, id string) (*event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open spool file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpoolBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read spool file: %w", err)
	}
	if len(data) > maxSpoolBytes {
		return nil, fmt.Errorf("spool file over %d bytes", maxSpoolBytes)
	}
	var rec spoolRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("decode spool file: %w", err)
	}
	switch {
	case rec.Version != spoolVersion:
		return nil, fmt.Errorf("spool file version %d, want %d", rec.Version, spoolVersion)
	case rec.ID != id:
		return nil, fmt.Errorf("spool file holds event %q, named %q", rec.ID, id)
	case !json.Valid([]byte(rec.Body)):
		return nil, errors.New("spool file body is not JSON")
	}
	return &event{
		id: rec.ID, typ: rec.Type, batch: rec.Batch, created: time.Unix(rec.CreatedAt, 0),
		body: []byte(rec.Body), pending: rec.Pending,
	}, nil
}
