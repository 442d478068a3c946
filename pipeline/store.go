package pipeline

import (
	"context"
	"io"

	"github.com/batchd/batchd/pipeline/ledger"
)

// Store owns one batch's files where its source keeps them: the input and
// its options, the published results and batch object, and the input's
// retirement. The pipeline keeps the ledger, the result files in progress
// and group commit; a Store only moves what the pipeline hands it.
// Implementations: store/folder (a data directory) and store/bucket (a
// MinIO/S3 bucket); store/storetest is the contract suite both pass.
//
// The pipeline calls a Store from one goroutine at a time per batch, in
// this order: Files, Options and OpenInput (any number of times), Resume,
// then Checkpoint and Progress while the batch runs, then Publish, then
// RetireRecord and Retire. A run that stops early (shutdown, an error)
// stops anywhere before Retire; the next run of the same input calls the
// same sequence again, so every method must tolerate a repeat.
type Store interface {
	// Files names the input and result files as the user sees them, for
	// the batch object.
	Files() Files

	// OpenInput opens the input from its start. Every call reads the same
	// content (the one the source delivered); an input that is not a
	// regular file, or has changed, is an error.
	OpenInput(ctx context.Context) (io.ReadCloser, error)

	// Options returns NAME.options.json as it was when the batch was
	// delivered, or nil when there is none.
	Options(ctx context.Context) ([]byte, error)

	// Resume yields the result lines a run elsewhere made durable through
	// Checkpoint (another daemon that lost the input); it yields nothing
	// where results are never checkpointed. Lines may repeat; the
	// pipeline keeps the first of each and skips lines it has already.
	Resume(ctx context.Context, yield func(Committed) error) error

	// Checkpoint is told of every group commit once it is durable in the
	// pipeline's ledger: the lines committed since the previous call, in
	// the order written. It runs on the batch's writer and must not block
	// on the network; a store that saves them elsewhere does so in the
	// background, at least once. An error stops the run as a write error
	// would. The folder needs none (a no-op).
	Checkpoint(lines []Committed) error

	// Progress replaces the batch object (NAME.batch.json) while the batch
	// runs. It is best effort: not durable, possibly deferred or dropped,
	// and it never replaces the final object Publish wrote.
	Progress(ctx context.Context, object []byte) error

	// Publish makes the batch's results final: the result files (Output,
	// Errors and Document; copied or linked; the pipeline keeps its own and never changes them
	// afterwards) and then the final batch object. Each appears
	// atomically: a reader never sees a torn file, and sees the final
	// object only once the result files are in place. Publishing the same
	// results again is harmless.
	Publish(ctx context.Context, r Results) error

	// RetireRecord returns what FinishRetire of this store's kind needs to
	// finish an interrupted Retire, or nil when Retire is idempotent on
	// its own. The pipeline keeps it in the ledger from before Retire until
	// Retire returns, and hands it back through Recover after a crash.
	RetireRecord() ([]byte, error)

	// Retire takes the input out of the inbox once its results are
	// published: the input (and the options that went with it) move to
	// done/ and its cancel request is removed. An input replaced in the
	// meantime stays, to run as a new batch. It is idempotent.
	Retire(ctx context.Context) error
}

// Files are the names a batch's files have for the user (file or object
// names, without folders).
type Files struct {
	Input, Options, Output, Errors string
}

// Results is what Publish places.
type Results struct {
	// Output and Errors are the committed result files, which the pipeline
	// owns; both are empty for a batch that failed before any request
	// ran: it has no results, and result files an earlier batch of the
	// same name left are removed.
	Output, Errors string
	// Document is the results in a requests document's own shape
	// (NAME.results.json), which the pipeline owns as it owns Output; empty
	// for an input that is not a requests document, and then a file of
	// that name an earlier batch left is removed.
	Document string
	// Object is the final batch object (NAME.batch.json).
	Object []byte
	// Batch is the ledger's record of the batch as this name published it
	// (a copy the store may keep): a later name that runs the same content
	// changes the shared record, never this.
	Batch *ledger.Batch
}
