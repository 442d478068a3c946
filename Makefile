# batchd — see README.md.
GO      ?= go
# The kernels' SIMD fast path uses Go's simd/archsimd, which exists only
# under this experiment; without it the portable kernels are built.
export GOEXPERIMENT ?= simd
BIN     := bin/batchd
DATA    ?= ./data
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PREFIX  ?= /usr/local
DESTDIR ?=
# batchd version prints these; without them it reads Go's vcs stamp (absent
# in a build outside a checkout, e.g. a container build without .git).
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)

.PHONY: build build-cuda run test test-short bench fuzz vet clean install

build:
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)" -o $(BIN) ./cmd/batchd

# The same binary with the CUDA device (kernels/cuda, build tag cuda): it
# finds libcuda and libcublasLt when it starts (purego, still CGO_ENABLED=0),
# which makes it dynamically linked against libc, unlike the static default.
build-cuda:
	$(GO) build -tags cuda -trimpath -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)" -o $(BIN) ./cmd/batchd

# The main job: starts the daemon on $(DATA), drops examples/ into the inbox
# and shows where the results appear. See scripts/run.sh.
run: build
	DATA=$(DATA) bash scripts/run.sh

# The slowest engine tests, left out on the emulated CUDA device (minutes
# each there: every CUDA thread is a fiber); they run on the CPU and the
# reference device.
EMU_SKIP = TestDeepQueueGroupsSharedPrefixes|TestBatchInvarianceSixtyFourMixed|TestSpecSamplingIdentical|TestSpecSampledHistogramMatches|TestSpecBatchedMixedPerRequest

# Every test, with the race detector; then the native engine's tests again
# on the plain-Go reference device (kernels/refdev), which proves the model
# runs through the kernels.Device interface alone; and on the CUDA device
# over the host emulation of its kernels.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	BATCHD_DEVICE=reference $(GO) test -count=1 -timeout 20m ./engine/native/...
	@if command -v clang-19 >/dev/null || command -v clang++ >/dev/null || command -v g++ >/dev/null; then \
	  echo "engine tests on the emulated CUDA device (kernels/cuda/emu)"; \
	  BATCHD_DEVICE=cuda-emu $(GO) test -count=1 -timeout 20m -skip "$(EMU_SKIP)" ./engine/native/; \
	else echo "skipping the engine tests on the emulated CUDA device: no C++ compiler (apt install clang-19)"; fi

test-short:
	$(GO) test -short -count=1 ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./pipeline/...
	$(BIN) bench pipeline

# Every fuzz target, FUZZTIME each (CI runs them 10s each; see scripts/fuzz.sh).
FUZZTIME ?= 5m
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# The binary, the systemd unit (ExecStart pointing at the binary), the
# sysusers.d snippet for its user, and the example config, which never
# replaces one already there. scripts/check-install.sh checks the layout.
UNITDIR ?= /lib/systemd/system
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/batchd
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|^ExecStart=/usr/local/bin/batchd |ExecStart=$(PREFIX)/bin/batchd |' deploy/systemd/batchd.service \
		> $(DESTDIR)$(UNITDIR)/batchd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/batchd.service
	install -D -m 0644 deploy/systemd/batchd.sysusers.conf $(DESTDIR)/usr/lib/sysusers.d/batchd.conf
	@if [ -e $(DESTDIR)/etc/batchd/config.yaml ]; then \
		echo "keeping $(DESTDIR)/etc/batchd/config.yaml (the example is deploy/config.example.yaml)"; \
	else \
		install -D -m 0644 deploy/config.example.yaml $(DESTDIR)/etc/batchd/config.yaml; \
	fi

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
