// Package s3 is the bucket batch source: it finds the inputs and cancel
// requests in a MinIO/S3 bucket's inbox/ prefix, which follows the folder
// contract (ARCHITECTURE.md §2), by a periodic listing and by the bucket's
// notifications, and delivers them as watcher events. Running what it
// finds is store/bucket's (leases, checkpoints, publication; docs/bucket.md),
// through the same client (store/bucket/s3client).
//
// It imports no batchd package but watcher, filecontract and
// store/bucket/s3client.
package s3
