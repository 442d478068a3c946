package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers, as OpenAI sends them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix marks a base64-encoded secret (Standard Webhooks, OpenAI).
const secretPrefix = "whsec_"

// DefaultTolerance is the timestamp tolerance Verify uses when given none.
const DefaultTolerance = 5 * time.Minute

var (
	// ErrSignature means no signature in the header matches the body.
	ErrSignature = errors.New("webhook: signature mismatch")
	// ErrTimestamp means the webhook-timestamp header is missing, malformed
	// or outside the tolerance.
	ErrTimestamp = errors.New("webhook: bad timestamp")
)

// signingKey turns a configured secret into the HMAC key.
func signingKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		if key, err2 := base64.RawStdEncoding.DecodeString(enc); err2 == nil {
			return key, nil
		}
		return nil, fmt.Errorf("decode %s secret: %w", secretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("decode %s secret: empty key", secretPrefix)
	}
	return key, nil
}

// mac returns HMAC-SHA256(key, id "." timestamp "." body).
func mac(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// sign returns the base64 signature of a delivery.
func sign(key []byte, id, timestamp string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
}

// Verify checks a delivery the way a receiver should: the webhook-timestamp
// header is within tolerance of now (tolerance <= 0 means
// DefaultTolerance), and one of the space-separated "v1,<base64>" entries of
// webhook-signature is the HMAC-SHA256, keyed by secret (read as Config.Secret
// is), of webhook-id "." webhook-timestamp "." body. The errors wrap
// ErrTimestamp or ErrSignature.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := signingKey(secret)
	if err != nil {
		return fmt.Errorf("webhook: verify: %w", err)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, ts, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, HeaderID)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q", ErrTimestamp, HeaderTimestamp, ts)
	}
	if skew := now.Sub(time.Unix(sec, 0)).Abs(); skew > tolerance {
		return fmt.Errorf("%w: %s is %v away from now, over %v", ErrTimestamp, HeaderTimestamp, skew, tolerance)
	}
	want := mac(key, id, ts, body)
	for entry := range strings.FieldsSeq(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w for %s %q", ErrSignature, HeaderID, id)
}
