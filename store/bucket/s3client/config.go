// Package s3client is batchd's client of a MinIO/S3 bucket: the object
// keys of the file contract under the configured prefix, reads and writes
// with a capped, jittered backoff while the server cannot be reached,
// conditional writes (Cond), downloads that resume where a dropped
// connection stopped, listings, and a second connection for leases (the
// Lease* methods). It knows objects, not what batchd keeps in them: the
// lease, checkpoint and publication records are store/bucket's, which runs
// the protocol (docs/bucket.md); the inbox listing and notifications are
// watcher/s3's.
//
// It imports no batchd package but filecontract.
package s3client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config configures a Bucket, and the watcher and stores of one.
type Config struct {
	// URL is s3://BUCKET or s3://BUCKET/PREFIX.
	URL string
	// Endpoint is the server's host:port (e.g. 127.0.0.1:9000, s3.amazonaws.com).
	Endpoint string
	// Region is the bucket's region ("" lets the client find out).
	Region string
	// TLS makes the connection HTTPS; InsecureSkipVerify accepts any
	// certificate (self-signed test servers only).
	TLS                bool
	InsecureSkipVerify bool
	// AccessKey, SecretKey and SessionToken are static credentials. When
	// they are empty the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
	// MINIO_ROOT_USER/MINIO_ROOT_PASSWORD) and then CredentialsFile (an AWS
	// shared credentials file, Profile in it) are tried.
	AccessKey, SecretKey, SessionToken string
	CredentialsFile, Profile           string

	// Owner names this daemon in leases and checkpoints; it must differ
	// between daemons sharing a bucket (default: host name, pid and a random
	// suffix).
	Owner string
	// LeaseTTL is how long a claim lasts without renewal; a dead daemon's
	// batches wait this long before another daemon resumes them.
	LeaseTTL time.Duration
	// ListInterval is how often the inbox is listed; a lost notification
	// delays an input by at most this much.
	ListInterval time.Duration
	// Retry bounds the backoff between attempts when the server cannot be
	// reached (it doubles from RetryMin, with jitter).
	RetryMin, RetryMax time.Duration

	Logger *slog.Logger
}

// DefaultConfig returns the defaults for the bucket at url.
func DefaultConfig(url string) Config {
	return Config{
		URL:          url,
		LeaseTTL:     60 * time.Second,
		ListInterval: 30 * time.Second,
		RetryMin:     500 * time.Millisecond,
		RetryMax:     30 * time.Second,
	}
}

// ParseURL splits s3://BUCKET/PREFIX into the bucket and the prefix (without
// leading or trailing slashes).
func ParseURL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("source %q: %w", raw, err)
	}
	if u.Scheme != "s3" {
		return "", "", fmt.Errorf("source %q: not an s3://BUCKET/PREFIX url", raw)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("source %q: no bucket name", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", "", fmt.Errorf("source %q: only s3://BUCKET/PREFIX is allowed", raw)
	}
	return u.Host, strings.Trim(u.Path, "/"), nil
}

// Validate checks the config, naming the bad field.
func (c Config) Validate() error {
	if _, _, err := ParseURL(c.URL); err != nil {
		return err
	}
	switch {
	case c.Endpoint == "":
		return errors.New("s3.endpoint: required (host:port of the MinIO/S3 server)")
	case strings.Contains(c.Endpoint, "://"):
		return fmt.Errorf("s3.endpoint: %q: give host:port, and s3.tls for https", c.Endpoint)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("s3.lease_ttl: must be at least 1s, got %s", c.LeaseTTL)
	case c.ListInterval <= 0:
		return fmt.Errorf("s3.list_interval: must be positive, got %s", c.ListInterval)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("s3 retry: need 0 < min <= max, got %s and %s", c.RetryMin, c.RetryMax)
	case (c.AccessKey == "") != (c.SecretKey == ""):
		return errors.New("s3.access_key and s3.secret_key: give both or neither")
	}
	return nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "batchd"
	}
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
