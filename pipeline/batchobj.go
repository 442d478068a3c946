package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/ledger"
)

// Batch statuses, as OpenAI names them (ledger.Transition changes them).
const (
	StatusValidating = ledger.StatusValidating
	StatusFailed     = ledger.StatusFailed
	StatusInProgress = ledger.StatusInProgress
	StatusFinalizing = ledger.StatusFinalizing
	StatusCompleted  = ledger.StatusCompleted
	StatusExpired    = ledger.StatusExpired
	StatusCancelling = ledger.StatusCancelling
	StatusCancelled  = ledger.StatusCancelled
)

// Terminal reports whether a batch in this status will not change again
// (unless its content is dropped again).
func Terminal(status string) bool {
	switch status {
	case StatusFailed, StatusCompleted, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// NoCompletionWindow is the completion_window of a batch that never
// expires (its options and the config set none); its expires_at is null.
const NoCompletionWindow = "none"

// BatchObject is NAME.batch.json: OpenAI's batch object, plus a "batchd"
// member with what OpenAI's shape has no place for.
type BatchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *BatchErrors      `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    RequestCounts     `json:"request_counts"`
	Usage            Usage             `json:"usage"`
	Metadata         map[string]string `json:"metadata"`
	Batchd           BatchdInfo        `json:"batchd"`
}

// BatchErrors is the errors member of a failed batch.
type BatchErrors struct {
	Object string              `json:"object"`
	Data   []ledger.BatchError `json:"data"`
}

// RequestCounts counts a batch's requests; Total = Completed + Failed once it ends.
type RequestCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// Usage sums the token usage of a batch's results, in OpenAI's shape: each
// direction has its own details.
type Usage struct {
	InputTokens         int64               `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int64               `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int64               `json:"total_tokens"`
}

// InputTokensDetails is usage.input_tokens_details: CachedTokens sums the
// lines' prompt_tokens_details.cached_tokens.
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// OutputTokensDetails is usage.output_tokens_details: ReasoningTokens
// stays 0 until an engine reports it.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// BatchdInfo is what batchd adds to the batch object.
type BatchdInfo struct {
	Name       string  `json:"name"`
	InputFile  string  `json:"input_file"`
	OutputFile string  `json:"output_file"`
	ErrorFile  string  `json:"error_file"`
	UpdatedAt  int64   `json:"updated_at"`
	Rate       float64 `json:"rate"` // requests per second over the current run
	Paused     bool    `json:"paused,omitempty"`
}

// ObjectID is the id of the batch object name shows of record b. Records
// are by content, so two names with the same content share one (the second
// reuses the first's results); each name still is a batch of its own: the
// name that made the record shows its id, another name an id derived from
// the record's and the name.
func ObjectID(b *ledger.Batch, name string) string {
	if name == "" || b.Origin == "" || name == b.Origin {
		return b.ID
	}
	sum := sha256.Sum256([]byte(b.ID + "\x00" + name))
	return "batch_" + hex.EncodeToString(sum[:16])
}

// InputFileID is the file id of batch id's input, as the API serves it
// (GET /v1/files/ID): "file-i" and the hex of the batch id. NAME.batch.json
// and the API show the same one; batchd.input_file is the input's path.
func InputFileID(batchID string) string {
	return InputFilePrefix + strings.TrimPrefix(batchID, "batch_")
}

// InputFilePrefix begins the file id of a batch's input.
const InputFilePrefix = "file-i"

func ts(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

// NewBatchObject renders a ledger record in OpenAI's shape.
func NewBatchObject(b *ledger.Batch, info BatchdInfo) *BatchObject {
	o := &BatchObject{
		ID:               ObjectID(b, info.Name),
		Object:           "batch",
		Endpoint:         b.Endpoint,
		InputFileID:      InputFileID(b.ID),
		CompletionWindow: b.CompletionWindow,
		Status:           b.Status,
		CreatedAt:        b.CreatedAt,
		InProgressAt:     ts(b.InProgressAt),
		ExpiresAt:        ts(b.ExpiresAt),
		FinalizingAt:     ts(b.FinalizingAt),
		CompletedAt:      ts(b.CompletedAt),
		FailedAt:         ts(b.FailedAt),
		ExpiredAt:        ts(b.ExpiredAt),
		CancellingAt:     ts(b.CancellingAt),
		CancelledAt:      ts(b.CancelledAt),
		RequestCounts:    RequestCounts{Total: b.Total, Completed: b.Completed, Failed: b.Failed},
		Usage: Usage{
			InputTokens:        b.InputTokens,
			InputTokensDetails: InputTokensDetails{CachedTokens: b.CachedTokens},
			OutputTokens:       b.OutputTokens,
			TotalTokens:        AddTokens(max(b.InputTokens, 0), b.OutputTokens),
		},
		Metadata: b.Metadata,
		Batchd:   info,
	}
	if o.CompletionWindow == "" {
		// No window applies (none in the options or the config): say so
		// rather than OpenAI's "24h", which would promise an expiry that
		// never comes.
		o.CompletionWindow = NoCompletionWindow
	}
	if len(b.Errors) > 0 {
		o.Errors = &BatchErrors{Object: "list", Data: b.Errors}
	}
	if Terminal(b.Status) && len(b.Errors) == 0 {
		o.OutputFileID = strPtr(info.OutputFile)
		o.ErrorFileID = strPtr(info.ErrorFile)
	}
	return o
}

// batchObject renders batch b as NAME.batch.json.
func (p *Pipeline) batchObject(job Job, b *ledger.Batch, rate float64) ([]byte, error) {
	files := job.Store.Files()
	info := BatchdInfo{
		Name:       job.Name,
		InputFile:  files.Input,
		OutputFile: files.Output,
		ErrorFile:  files.Errors,
		UpdatedAt:  p.cfg.Now().Unix(),
		Rate:       rate,
	}
	if sr, ok := p.eng.(engine.StatsReporter); ok {
		info.Paused = sr.Stats().Paused
	}
	data, err := json.MarshalIndent(NewBatchObject(b, info), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode batch object: %w", err)
	}
	return append(data, '\n'), nil
}

// ReadBatchObject reads a NAME.batch.json file.
func ReadBatchObject(path string) (*BatchObject, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read batch object: %w", err)
	}
	o := new(BatchObject)
	if err := json.Unmarshal(raw, o); err != nil {
		return nil, fmt.Errorf("parse batch object %s: %w", path, err)
	}
	return o, nil
}
