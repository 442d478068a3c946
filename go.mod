module github.com/batchd/batchd

go 1.26.8

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/fsnotify/fsnotify v1.10.1
	github.com/hashicorp/go-retryablehttp v0.7.8
	go.etcd.io/bbolt v1.5.0
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/sync v0.25.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
