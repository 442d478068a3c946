package s3client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/batchd/batchd/filecontract"
)

// Key prefixes of the file contract under the configured prefix.
const (
	dirInbox    = filecontract.DirInbox
	dirOutbox   = filecontract.DirOutbox
	dirDone     = filecontract.DirDone
	dirRejected = filecontract.DirRejected
)

// ErrPrecondition is a conditional write or read that did not hold: someone
// else wrote the object first.
var ErrPrecondition = errors.New("precondition failed")

// Bucket is a connection to the bucket and the names of its objects.
type Bucket struct {
	cfg    Config
	log    *slog.Logger
	client *minio.Client
	leases *minio.Client // lease reads and writes only (LeasePut, LeaseGet, LeaseRemove)
	bucket string
	prefix string
}

// NewBucket returns a client for the config's bucket; it does no I/O.
func NewBucket(cfg Config) (*Bucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	bucket, prefix, _ := ParseURL(cfg.URL)
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.EnvMinio{},
			&credentials.FileAWSCredentials{Filename: cfg.CredentialsFile, Profile: cfg.Profile},
		})
	}
	client, err := newClient(cfg, creds, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	// Leases have a client of their own: a renewal waits behind no upload
	// for a connection, and gives up (to try again) well within the TTL.
	leases, err := newClient(cfg, creds, LeaseTimeout(cfg.LeaseTTL))
	if err != nil {
		return nil, err
	}
	return &Bucket{cfg: cfg, log: cfg.Logger.With("component", "s3", "bucket", bucket), client: client, leases: leases, bucket: bucket, prefix: prefix}, nil
}

// newClient is a client of cfg's server whose requests give up waiting for
// a response after responseTimeout.
func newClient(cfg Config, creds *credentials.Credentials, responseTimeout time.Duration) (*minio.Client, error) {
	tr, err := minio.DefaultTransport(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("s3 transport: %w", err)
	}
	if cfg.TLS && cfg.InsecureSkipVerify {
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{}
		}
		tr.TLSClientConfig.InsecureSkipVerify = true
	}
	tr.ResponseHeaderTimeout = responseTimeout
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds: creds, Secure: cfg.TLS, Region: cfg.Region, Transport: tr,
		// batchd retries with its own backoff and logs; one attempt here.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", cfg.Endpoint, err)
	}
	return client, nil
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.bucket }

// Owner is the name this daemon uses in leases and checkpoints.
func (b *Bucket) Owner() string { return b.cfg.Owner }

// Config is the bucket's config, defaults filled in.
func (b *Bucket) Config() Config { return b.cfg }

// Logger is the bucket's logger, which names the bucket.
func (b *Bucket) Logger() *slog.Logger { return b.log }

// Key is the object key of name under the configured prefix and dir.
func (b *Bucket) Key(dir, name string) string {
	if b.prefix == "" {
		return dir + "/" + name
	}
	return b.prefix + "/" + dir + "/" + name
}

// InboxKey, OutboxKey, DoneKey and RejectedKey name objects of the file
// contract (rejected/ holds refused inputs, as DATA/rejected/ does).
func (b *Bucket) InboxKey(base string) string    { return b.Key(dirInbox, base) }
func (b *Bucket) OutboxKey(base string) string   { return b.Key(dirOutbox, base) }
func (b *Bucket) DoneKey(base string) string     { return b.Key(dirDone, base) }
func (b *Bucket) RejectedKey(base string) string { return b.Key(dirRejected, base) }

// URL names an object for logs and errors.
func (b *Bucket) URL(key string) string { return "s3://" + path.Join(b.bucket, key) }

// Connect checks that the bucket exists and can be read, retrying with
// backoff while the server cannot be reached (until ctx is done). A missing
// bucket or refused credentials are errors at once, naming the bucket.
func (b *Bucket) Connect(ctx context.Context) error {
	return b.retry(ctx, "connect", func() error {
		ok, err := b.client.BucketExists(ctx, b.bucket)
		if err != nil {
			return err
		}
		if !ok {
			return permanent(fmt.Errorf("bucket %q does not exist on %s", b.bucket, b.cfg.Endpoint))
		}
		// Listing needs its own permission: find out now, not at the first
		// batch. The first object answers that; then the listing is
		// cancelled and drained, or the client's goroutine would block
		// forever sending the next one.
		lctx, cancel := context.WithCancel(ctx)
		objs := b.client.ListObjects(lctx, b.bucket, minio.ListObjectsOptions{Prefix: b.Key(dirInbox, ""), MaxKeys: 1})
		first, listed := <-objs
		cancel()
		for range objs {
		}
		if listed && first.Err != nil {
			return first.Err
		}
		return nil
	})
}

// permanentError is an error retrying cannot help.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

// classify turns what the server said into an error a person can act on,
// marking those retrying cannot fix.
func (b *Bucket) classify(op string, err error) error {
	var pe permanentError
	if errors.As(err, &pe) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "InvalidToken", "ExpiredToken":
		return permanent(fmt.Errorf("%s: access denied to bucket %q on %s (check the credentials and their policy): %s", op, b.bucket, b.cfg.Endpoint, resp.Message))
	case "NoSuchBucket":
		return permanent(fmt.Errorf("%s: bucket %q does not exist on %s", op, b.bucket, b.cfg.Endpoint))
	case "PreconditionFailed":
		return permanent(fmt.Errorf("%s: %w", op, ErrPrecondition))
	case "NoSuchKey":
		return permanent(fmt.Errorf("%s: %w", op, errNotFound))
	}
	if resp.StatusCode == http.StatusPreconditionFailed {
		return permanent(fmt.Errorf("%s: %w", op, ErrPrecondition))
	}
	if resp.StatusCode == http.StatusNotFound {
		return permanent(fmt.Errorf("%s: %w", op, errNotFound))
	}
	return fmt.Errorf("%s: %w", op, err)
}

var errNotFound = errors.New("object not found")

// IsNotFound tells whether err says the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, errNotFound) }

// retry runs f until it succeeds, fails permanently or ctx is done, with a
// capped, jittered exponential backoff, logging each failure.
func (b *Bucket) retry(ctx context.Context, op string, f func() error) error {
	base := b.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			if attempt > 1 {
				b.log.Info("bucket reachable again", "op", op, "attempts", attempt)
			}
			return nil
		}
		err = b.classify(op, err)
		var pe permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, ctx.Err(), err)
		}
		wait := base/2 + rand.N(base/2+1)
		b.log.Warn("bucket unreachable; retrying", "op", op, "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", op, ctx.Err(), err)
		case <-t.C:
		}
		base = min(2*base, b.cfg.RetryMax)
	}
}
