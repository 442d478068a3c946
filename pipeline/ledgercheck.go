package pipeline

import (
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
// batch's result files are. checkRetiring checks a retiring record
// (Store.RetireRecord) as the Recover function given to Recover would read
// it; nil accepts any. The pipeline must be closed: a running batchd holds
// the file, and after timeout CheckLedger returns ledger.ErrLocked.
func CheckLedger(stateDir string, timeout time.Duration, checkRetiring func(name string, record []byte) error) (*ledger.CheckReport, error) {
	return ledger.Check(ledgerPath(stateDir), ledger.CheckOptions{
		Timeout: timeout,
		ResultFiles: func(b *ledger.Batch) (string, string) {
			return stateResultPaths(stateDir, b.ID, b.Gen)
		},
		Retiring: checkRetiring,
	})
}
