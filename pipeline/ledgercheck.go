package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/batchd/batchd/pipeline/ledger"
)

// ledgerPath is the ledger file of a state directory.
func ledgerPath(stateDir string) string { return filepath.Join(stateDir, "ledger.db") }

// stateBatchDir holds a batch's result files while the pipeline owns them.
func stateBatchDir(stateDir, id string) string { return filepath.Join(stateDir, "batches", id) }

// stateResultPaths are generation gen of a batch's result files.
func stateResultPaths(stateDir, id string, gen int) (out, errs string) {
	dir := stateBatchDir(stateDir, id)
	return filepath.Join(dir, "output."+strconv.Itoa(gen)+".jsonl"), filepath.Join(dir, "errors."+strconv.Itoa(gen)+".jsonl")
}

// CheckLedger checks the ledger of state directory stateDir without
// changing it (ledger.Check), with what the pipeline knows: where each
// batch's result files are and what a retiring record must hold. The
// pipeline must be closed: a running batchd holds the file, and after
// timeout CheckLedger returns ledger.ErrLocked.
func CheckLedger(stateDir string, timeout time.Duration) (*ledger.CheckReport, error) {
	return ledger.Check(ledgerPath(stateDir), ledger.CheckOptions{
		Timeout: timeout,
		ResultFiles: func(b *ledger.Batch) (string, string) {
			return stateResultPaths(stateDir, b.ID, b.Gen)
		},
		Retiring: func(_ string, v []byte) error {
			_, err := decodeRetiring(v)
			return err
		},
	})
}

// decodeRetiring reads a retiring record, refusing one Recover could not
// finish.
func decodeRetiring(v []byte) (retiring, error) {
	var rec retiring
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	if rec.Inbox == "" || rec.DoneDir == "" {
		return rec, errors.New("it names no inbox or no done directory")
	}
	return rec, nil
}
