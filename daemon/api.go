package daemon

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// The OpenAI-compatible API (Files, Batches, online endpoints) lives in
// api_*.go; this file has what they share: auth, errors, lists.

// apiError is OpenAI's error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeAPIError answers with OpenAI's error shape.
func writeAPIError(w http.ResponseWriter, status int, code, param, format string, args ...any) {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "invalid_request_error"
	case status == http.StatusNotFound:
		typ = "invalid_request_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	e := apiError{Error: apiErrorBody{Message: msg, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// requireKey wraps h with API-key auth: Authorization: Bearer KEY, one of
// keys. With no keys configured the API is open (the daemon warns at start
// when it listens beyond loopback). Keys are never logged.
func requireKey(keys []string, h http.Handler) http.Handler {
	if len(keys) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || tok == "" {
			writeAPIError(w, http.StatusUnauthorized, "missing_api_key", "",
				"You didn't provide an API key. Provide it in the Authorization header as Bearer KEY.")
			return
		}
		for _, k := range keys {
			if subtle.ConstantTimeCompare([]byte(tok), []byte(k)) == 1 {
				h.ServeHTTP(w, r)
				return
			}
		}
		writeAPIError(w, http.StatusUnauthorized, "invalid_api_key", "", "Incorrect API key provided.")
	})
}

// listPage is OpenAI's cursor list: objects newest first, `after` the id
// of the last object of the previous page.
type listPage[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// paginate cuts items (already ordered) after the item whose id is after,
// to at most limit. It reports false when after names no item.
func paginate[T any](items []T, id func(T) string, after string, limit int) (listPage[T], bool) {
	start := 0
	if after != "" {
		found := false
		for i, it := range items {
			if id(it) == after {
				start, found = i+1, true
				break
			}
		}
		if !found {
			return listPage[T]{}, false
		}
	}
	rest := items[start:]
	page := listPage[T]{Object: "list", Data: rest[:min(limit, len(rest))], HasMore: len(rest) > limit}
	if page.Data == nil {
		page.Data = []T{}
	}
	if n := len(page.Data); n > 0 {
		f, l := id(page.Data[0]), id(page.Data[n-1])
		page.FirstID, page.LastID = &f, &l
	}
	return page, true
}

// limitParam reads ?limit= (default def, 1..max).
func limitParam(w http.ResponseWriter, r *http.Request, def, max int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "limit", "limit must be an integer between 1 and %d, got %q", max, v)
		return 0, false
	}
	return n, true
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// validID tells whether id is safe to use as a file name: letters, digits,
// '-' and '_' only.
func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || rest == "" || len(rest) > 80 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

var errNotFound = errors.New("not found")

// logAPI logs a server-side failure of an API call (never its headers).
func logAPI(log *slog.Logger, r *http.Request, err error) {
	log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
}

// readRecord decodes the JSON file at path (an API record: a file object,
// an API batch) into v; errNotFound when there is no such file.
func readRecord(path string, v any) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
