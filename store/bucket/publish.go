package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/batchd/batchd/store/bucket/s3client"
)

// Where results wait to be published, and the records that publish them.
const (
	dirStaging   = ".batchd/staging"   // NAME/ETAG/OWNER/BASE
	dirPublished = ".batchd/published" // NAME/ETAG.json
)

// maxPublicationBytes bounds a publication record read back.
const maxPublicationBytes = 1 << 20

// publication is the commit record of a batch's results: which daemon's
// staged objects become the outbox objects. It lives at
// .batchd/published/NAME/ETAG.json and is created only if it does not
// exist, so exactly one daemon publishes each input version.
type publication struct {
	Owner   string            `json:"owner"`
	Objects map[string]string `json:"objects"` // outbox key → staged key
}

func publicationKey(b *s3client.Bucket, name, etag string) string {
	return b.Key(dirPublished, name+"/"+etag+".json")
}

// stagingKey is where this daemon stages result file base of batch name at
// etag before publishing it.
func stagingKey(b *s3client.Bucket, name, etag, base string) string {
	return b.Key(dirStaging, name+"/"+etag+"/"+b.Owner()+"/"+base)
}

// commit creates the publication record of batch name at etag. It returns
// the record that holds: pub when this daemon's write created it (or an
// earlier write of its own did), another daemon's otherwise.
func commit(ctx context.Context, b *s3client.Bucket, name, etag string, pub publication) (publication, error) {
	data, _ := json.Marshal(pub)
	key := publicationKey(b, name, etag)
	_, err := b.PutBytes(ctx, key, data, "application/json", s3client.IfETag(""))
	if err == nil {
		return pub, nil
	}
	if !errors.Is(err, s3client.ErrPrecondition) {
		return publication{}, err
	}
	cur, ok, err := published(ctx, b, name, etag)
	if err != nil {
		return publication{}, err
	}
	if !ok {
		return publication{}, fmt.Errorf("publication record %s vanished", b.URL(key))
	}
	return cur, nil
}

// published reads the publication record of batch name at etag.
func published(ctx context.Context, b *s3client.Bucket, name, etag string) (publication, bool, error) {
	var pub publication
	data, _, err := b.Get(ctx, publicationKey(b, name, etag), maxPublicationBytes)
	if s3client.IsNotFound(err) {
		return pub, false, nil
	}
	if err != nil {
		return pub, false, err
	}
	if err := json.Unmarshal(data, &pub); err != nil {
		return pub, false, fmt.Errorf("publication record of %s: %w", name, err)
	}
	return pub, true, nil
}

// install copies a publication's staged objects to their outbox keys
// (server-side, in parts when large). It is idempotent: whoever finds a
// record whose publisher died finishes the job.
func install(ctx context.Context, b *s3client.Bucket, pub publication) error {
	keys := make([]string, 0, len(pub.Objects))
	for k := range pub.Objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, dst := range keys {
		if err := b.Compose(ctx, pub.Objects[dst], dst); err != nil {
			return err
		}
	}
	return nil
}

// unpublish removes the publication record of batch name at etag and every
// daemon's staged objects for it.
func unpublish(ctx context.Context, b *s3client.Bucket, name, etag string) error {
	keys, err := b.List(ctx, b.Key(dirStaging, name+"/"+etag+"/"))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Remove(ctx, k); err != nil {
			return err
		}
	}
	return b.Remove(ctx, publicationKey(b, name, etag))
}
