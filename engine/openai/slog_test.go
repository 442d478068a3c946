package openai

import "log/slog"

const (
	slogDebug = slog.LevelDebug
	slogInfo  = slog.LevelInfo
	slogWarn  = slog.LevelWarn
)

var slogDiscard = slog.New(slog.DiscardHandler)
