package manifesttest

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Instruction is one Dockerfile instruction, continuation lines joined.
type Instruction struct {
	Line int
	Cmd  string // upper case: FROM, RUN, USER, ...
	Args string
}

// ParseDockerfile splits a Dockerfile into instructions. It is not a full
// parser (no heredocs, no escape directive): enough to check the instructions
// batchd's images must have; hadolint is not available here.
func ParseDockerfile(path string) ([]Instruction, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	var out []Instruction
	var cur *Instruction
	for i, line := range strings.Split(string(raw), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") || (t == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(t, "\\")
		t = strings.TrimSuffix(t, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(t, " ")
			cur = &Instruction{Line: i + 1, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		} else {
			cur.Args += " " + strings.TrimSpace(t)
		}
		if !cont {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: continuation at end of file", path, cur.Line)
	}
	return out, nil
}

// CheckDockerfile checks what batchd's images promise: a multi-stage static
// build, a non-root user, /data a volume, the API port, and a HEALTHCHECK
// that runs the binary itself (the final image has no shell or curl).
func CheckDockerfile(path string) error {
	ins, err := ParseDockerfile(path)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}
	lastFrom := -1
	froms := 0
	for i, in := range ins {
		if in.Cmd == "FROM" {
			froms++
			lastFrom = i
		}
	}
	if froms < 2 {
		fail("want a multi-stage build (a builder and a final stage), found %d FROM", froms)
	}
	build := false
	for _, in := range ins[:max(lastFrom, 0)] {
		if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			build = true
			for _, want := range []string{"CGO_ENABLED=0", "GOEXPERIMENT=simd", "-trimpath", "-X main.version="} {
				if !strings.Contains(in.Args, want) {
					fail("line %d: go build without %s", in.Line, want)
				}
			}
		}
	}
	if !build {
		fail("no go build in the builder stage")
	}
	final := ins[max(lastFrom, 0):]
	find := func(cmd string) *Instruction {
		var last *Instruction
		for i := range final {
			if final[i].Cmd == cmd {
				last = &final[i]
			}
		}
		return last
	}
	if u := find("USER"); u == nil {
		fail("final stage has no USER: it would run as root")
	} else if user, _, _ := strings.Cut(u.Args, ":"); user == "root" || user == "0" {
		fail("line %d: USER %s is root", u.Line, u.Args)
	}
	if v := find("VOLUME"); v == nil || !strings.Contains(v.Args, "/data") {
		fail("final stage: want VOLUME /data")
	}
	if e := find("EXPOSE"); e == nil || e.Args != fmt.Sprint(apiPort) {
		fail("final stage: want EXPOSE %d", apiPort)
	}
	if h := find("HEALTHCHECK"); h == nil {
		fail("final stage has no HEALTHCHECK")
	} else if !strings.Contains(h.Args, `CMD ["/usr/local/bin/batchd", "healthcheck"]`) {
		fail("line %d: HEALTHCHECK must run [\"/usr/local/bin/batchd\", \"healthcheck\"] (exec form: no shell in the image), got %s", h.Line, h.Args)
	}
	if e := find("ENTRYPOINT"); e == nil || e.Args != `["/usr/local/bin/batchd"]` {
		fail("final stage: want ENTRYPOINT [\"/usr/local/bin/batchd\"]")
	}
	return errors.Join(errs...)
}
