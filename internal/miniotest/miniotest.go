// Package miniotest runs a real MinIO server for tests: on a free loopback
// port, in a temporary directory, stopped when the test ends.
//
// The binary is $BATCHD_MINIO, or minio on PATH or in $(go env GOPATH)/bin
// (`go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c`;
// .ci/run does it). Without one, tests skip with a message saying so, unless
// BATCHD_REQUIRE_MINIO=1 (CI), where they fail.
package miniotest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credentials of the test servers.
const (
	AccessKey = "batchd-test"
	SecretKey = "batchd-test-secret"
)

// Server is a running MinIO server.
type Server struct {
	t        testing.TB
	bin      string
	dir      string
	Endpoint string // host:port
	console  string
	env      []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Binary finds the minio binary ("" when there is none).
func Binary() string {
	if p := os.Getenv("BATCHD_MINIO"); p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", "minio"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Start starts a server for the test (skipping it when there is no binary),
// with extra environment variables (MINIO_NOTIFY_..., say).
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "MinIO server binary not found: set BATCHD_MINIO, or run `go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c` (.ci/run does)"
		if os.Getenv("BATCHD_REQUIRE_MINIO") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), Endpoint: FreeAddr(t), console: FreeAddr(t), env: env}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// FreeAddr is a loopback address nothing listens on (yet).
func FreeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start (re)starts the server process on the same address and data, and
// waits until it answers its liveness check.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(s.dir, "minio.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "server", filepath.Join(s.dir, "data"), "--address", s.Endpoint, "--console-address", s.console)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME="+s.dir)
	cmd.Env = append(cmd.Env, s.env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start minio: %v", err)
	}
	s.cmd, s.log, s.done = cmd, log, make(chan struct{})
	done := s.done
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + s.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			data, _ := os.ReadFile(log.Name())
			s.t.Fatalf("minio exited at start: %s", data)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("minio did not become live within 90s (last error: %v)", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not synchronising on time
	}
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.log.Close()
	s.cmd = nil
}

// Client is a client with the server's root credentials.
func (s *Server) Client() *minio.Client {
	s.t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

var bucketSeq struct {
	sync.Mutex
	n int
}

// Bucket creates a new bucket and returns its name.
func (s *Server) Bucket() string {
	s.t.Helper()
	bucketSeq.Lock()
	bucketSeq.n++
	name := "batchd-test-" + strconv.Itoa(bucketSeq.n)
	bucketSeq.Unlock()
	if err := s.Client().MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		s.t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

// Put writes an object.
func (s *Server) Put(bucket, key string, data []byte) {
	s.t.Helper()
	if _, err := s.Client().PutObject(context.Background(), bucket, key, bytesReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		s.t.Fatalf("put %s: %v", key, err)
	}
}

// Get reads an object ("" and false when it does not exist).
func (s *Server) Get(bucket, key string) ([]byte, bool) {
	s.t.Helper()
	// A server just restarted answers 503 (XMinioServerNotInitialized)
	// until it has loaded its state: that is "ask again", not a failure.
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, status, err := s.get(bucket, key)
		switch {
		case err == nil:
			return data, true
		case status == http.StatusNotFound:
			return nil, false
		case status == http.StatusServiceUnavailable && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond) // poll the server's readiness
			continue
		}
		s.t.Fatalf("get %s: %v", key, err)
	}
}

// get reads an object once: its bytes, or the error and its HTTP status.
func (s *Server) get(bucket, key string) ([]byte, int, error) {
	obj, err := s.Client().GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, minio.ToErrorResponse(err).StatusCode, err
	}
	defer obj.Close()
	data, err := readAll(obj)
	if err != nil {
		return nil, minio.ToErrorResponse(err).StatusCode, err
	}
	return data, 0, nil
}

// Keys lists the keys under prefix.
func (s *Server) Keys(bucket, prefix string) []string {
	s.t.Helper()
	var keys []string
	for o := range s.Client().ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("list %s: %v", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// String describes the server.
func (s *Server) String() string { return fmt.Sprintf("minio at %s (data %s)", s.Endpoint, s.dir) }

// Log is what the server printed so far.
func (s *Server) Log() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "minio.log"))
	return string(data)
}
