// Package failpoint marks the durability steps of batchd (an fsync, a
// ledger commit, a publish, a retire) so that tests can crash the process
// there, or make the step fail with an I/O error, and prove that a restart
// recovers (docs/guarantees.md). It imports nothing of batchd.
//
// The points are compiled in only under the build tag failpoints; without
// it Inject is an empty function the compiler inlines away. A binary built
// with the tag reads BATCHD_FAILPOINT once, at start:
//
//	BATCHD_FAILPOINT=NAME[:N][=ACTION]
//
// arms the point NAME to act on its Nth hit (default the first), once.
// ACTION is crash (default: the process kills itself with SIGKILL, as an
// OOM kill or a power cut would end it: no deferred function runs), panic,
// eio (Inject returns syscall.EIO) or enospc (syscall.ENOSPC). A hit is
// reported on stderr first, as "batchd failpoint NAME: ACTION (hit N)".
package failpoint

// The durability steps, in the order a batch passes them.
const (
	// ResultsSync: result lines are written to the result files, before
	// their fsync (an error is the fsync's).
	ResultsSync = "results-sync"
	// LedgerCommit: the result files are fsynced, before the ledger
	// records them (an error is the commit's).
	LedgerCommit = "ledger-commit"
	// AfterCommit: the ledger recorded a group commit.
	AfterCommit = "after-commit"
	// AfterFinalizing: the batch record says finalizing.
	AfterFinalizing = "after-finalizing"
	// FolderPublishObject: the folder published the result files, before
	// the batch object.
	FolderPublishObject = "folder-publish-object"
	// FinalStatus: the results and the final object are published, before
	// the ledger records the final status.
	FinalStatus = "final-status"
	// RetireMove: the ledger holds the retiring record, before the input
	// moves to done/.
	RetireMove = "retire-move"
	// FolderRetireOptions: the folder moved the input to done/, before its
	// options file and cancel request follow.
	FolderRetireOptions = "folder-retire-options"
	// BucketCommit: the bucket staged the results and the object, before
	// the publication record is committed.
	BucketCommit = "bucket-commit"
	// BucketInstall: the publication record is committed, before its
	// objects are installed in the outbox.
	BucketInstall = "bucket-install"
)

// Names lists every point, for tests that visit each.
var Names = []string{
	ResultsSync, LedgerCommit, AfterCommit, AfterFinalizing, FolderPublishObject,
	FinalStatus, RetireMove, FolderRetireOptions, BucketCommit, BucketInstall,
}

// Env is the variable that arms a point in a binary built with the tag.
const Env = "BATCHD_FAILPOINT"
