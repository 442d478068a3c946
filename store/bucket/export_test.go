package bucket

import (
	"context"

	"github.com/batchd/batchd/store/bucket/s3client"
)

// ErrHeld is errHeld, for the external tests.
var ErrHeld = errHeld

// Claim claims an input as claim does, for the external tests: it tells
// whether another daemon could take the batch over.
func Claim(ctx context.Context, b *s3client.Bucket, name, key, etag string) error {
	_, err := claim(ctx, b, name, key, etag)
	return err
}
