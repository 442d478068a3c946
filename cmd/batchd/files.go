package main

// batchd prepare, stats and split: tools for OpenAI batch JSONL files as
// Doubleword's `dw files` has them. Each reads its input once, a line at a
// time (memory is bounded by the longest line), and writes through a
// temporary file and a rename, so a daemon watching the directory never sees
// a half-written file.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/filecontract"
)

func init() {
	for _, f := range []string{"model", "set", "o", "lines", "chat-template"} {
		valueFlags[f] = true
	}
}

// setFlags collects repeated --set flags.
type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

// bodySet is one body field prepare writes on every line.
type bodySet struct {
	key string
	val json.RawMessage
}

// parseSet parses "body.KEY=VALUE"; VALUE is JSON when it parses as JSON,
// else a string.
func parseSet(s string) (bodySet, error) {
	kv, val, ok := strings.Cut(s, "=")
	if !ok {
		return bodySet{}, fmt.Errorf("--set %q: want body.KEY=VALUE", s)
	}
	key, ok := strings.CutPrefix(kv, "body.")
	switch {
	case !ok:
		return bodySet{}, fmt.Errorf("--set %q: only body fields can be set: write body.%s=VALUE", s, kv)
	case key == "":
		return bodySet{}, fmt.Errorf("--set %q: the body field's name is empty", s)
	case strings.Contains(key, "."):
		return bodySet{}, fmt.Errorf("--set %q: %q is a nested field; set the whole top-level field as JSON, e.g. --set 'body.%s={...}'", s, key, key[:strings.Index(key, ".")])
	}
	raw := json.RawMessage(strings.TrimSpace(val))
	if !json.Valid(raw) || len(raw) == 0 {
		b, _ := json.Marshal(val)
		raw = b
	} else {
		var c bytes.Buffer
		_ = json.Compact(&c, raw)
		raw = c.Bytes()
	}
	return bodySet{key: key, val: raw}, nil
}

// member is one key and its raw value, in the order of the object.
type member struct {
	key string
	val json.RawMessage
}

// members decodes a JSON object into its members in order, values byte
// for byte as written.
func members(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var ms []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{t.(string), v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the object")
	}
	return ms, nil
}

// appendObject writes ms as a compact JSON object.
func appendObject(dst []byte, ms []member) []byte {
	dst = append(dst, '{')
	for i, m := range ms {
		if i > 0 {
			dst = append(dst, ',')
		}
		k, _ := json.Marshal(m.key)
		dst = append(append(append(dst, k...), ':'), m.val...)
	}
	return append(dst, '}')
}

// setBody returns line with every set written into its body (replacing
// the field wherever it occurs, else appending it); the line's other
// members and values are kept as written.
func setBody(line []byte, sets []bodySet) ([]byte, error) {
	top, err := members(line)
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	bi := -1
	for i, m := range top {
		if m.key == "body" {
			bi = i
		}
	}
	if bi < 0 {
		return nil, errors.New("has no body")
	}
	body, err := members(top[bi].val)
	if err != nil {
		return nil, errors.New("body is not a JSON object")
	}
	for _, s := range sets {
		found := false
		for i := range body {
			if body[i].key == s.key {
				body[i].val, found = s.val, true
			}
		}
		if !found {
			body = append(body, member(s))
		}
	}
	top[bi].val = appendObject(nil, body)
	return appendObject(make([]byte, 0, len(line)+64), top), nil
}

// eachLine calls f with each line of r (without its newline) and its
// 1-based number; lines of only white space are passed too.
func eachLine(r io.Reader, f func(n int, line []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if ferr := f(n, bytes.TrimRight(line, "\r\n")); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// atomicFile is a file written under a temporary name and then put in
// place: by a rename (replacing) or a link (refusing an existing file).
type atomicFile struct {
	*os.File
	path string
	w    *bufio.Writer
}

func createAtomic(path string) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*"+filecontract.SuffixPart)
	if err != nil {
		return nil, err
	}
	return &atomicFile{File: f, path: path, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// commit syncs the file and puts it at its path; replace allows an
// existing file there to be replaced.
func (a *atomicFile) commit(replace bool) error {
	err := a.w.Flush()
	if err == nil {
		err = a.Sync()
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if replace {
			err = os.Rename(a.Name(), a.path)
		} else if err = os.Link(a.Name(), a.path); err == nil {
			os.Remove(a.Name())
		}
	}
	if err != nil {
		os.Remove(a.Name())
	}
	return err
}

func (a *atomicFile) abort() {
	a.Close()
	os.Remove(a.Name())
}

// jsonlInput refuses a requests document (.json): these tools read batch
// lines.
func jsonlInput(path string) error {
	if strings.HasSuffix(path, filecontract.SuffixJSON) && !strings.HasSuffix(path, filecontract.SuffixJSONL) {
		return fmt.Errorf("%s is a requests document: these tools read OpenAI batch JSONL (convert it with batchd convert)", path)
	}
	return nil
}

// fileArg parses the flags of a command that takes one batch JSONL file
// and returns the file; false after it printed why not.
func fileArg(fs *flag.FlagSet, args []string, stderr io.Writer) (string, bool) {
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		if err == nil {
			fs.Usage()
		}
		return "", false
	}
	if err := jsonlInput(fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "batchd: %v\n", err)
		return "", false
	}
	return fs.Arg(0), true
}

func cmdPrepare(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: batchd prepare FILE [--model M] [--set body.KEY=VALUE ...] [-o OUT]

Rewrites every line of the batch file FILE: --model M sets body.model to M,
--set body.KEY=VALUE sets a body field (VALUE is JSON when it parses as JSON,
else a string: --set body.max_tokens=512, --set body.temperature=0,
--set 'body.stop=["\n"]', --set body.user=alice). FILE is rewritten in place
unless -o names another file (-o - writes to stdout). Everything else on a
line is kept as written. A line that is not a JSON object with a body object
is copied unchanged and reported with its number; the exit status is then 1.

`)
		fs.PrintDefaults()
	}
	model := fs.String("model", "", "the model to set on every line (body.model)")
	var sets setFlags
	fs.Var(&sets, "set", "body.KEY=VALUE to set on every line (repeatable)")
	out := fs.String("o", "", "write here instead of rewriting FILE (- for stdout); an existing file is not replaced")
	path, ok := fileArg(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	var bs []bodySet
	if *model != "" {
		m, _ := json.Marshal(*model)
		bs = append(bs, bodySet{"model", m})
	}
	for _, s := range sets {
		b, err := parseSet(s)
		if err != nil {
			return errorf(stderr, exitUsage, "%v", err)
		}
		bs = append(bs, b)
	}
	if len(bs) == 0 {
		return errorf(stderr, exitUsage, "prepare: nothing to set: give --model M or --set body.KEY=VALUE")
	}
	in, err := os.Open(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer in.Close()

	var w *bufio.Writer
	var af *atomicFile
	dst, replace := *out, false
	switch dst {
	case "-":
		w = bufio.NewWriter(stdout)
	case "":
		dst, replace = path, true
		fallthrough
	default:
		if !replace {
			if _, err := os.Lstat(dst); err == nil {
				return errorf(stderr, exitUsage, "%s exists: remove it or name another -o", dst)
			}
		}
		if af, err = createAtomic(dst); err != nil {
			return errorf(stderr, exitFailure, "%v", err)
		}
		w = af.w
	}
	bad := 0
	err = eachLine(in, func(n int, line []byte) error {
		if len(bytes.TrimSpace(line)) > 0 {
			if rewritten, err := setBody(line, bs); err == nil {
				line = rewritten
			} else {
				bad++
				fmt.Fprintf(stderr, "%s: line %d: %v: copied unchanged\n", path, n, err)
			}
		}
		w.Write(line)
		return w.WriteByte('\n')
	})
	if err == nil && af == nil {
		err = w.Flush()
	}
	if err != nil {
		if af != nil {
			af.abort()
		}
		return errorf(stderr, exitFailure, "prepare %s: %v", path, err)
	}
	if af != nil {
		if err := af.commit(replace); err != nil {
			return errorf(stderr, exitFailure, "prepare %s: write %s: %v", path, dst, err)
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "batchd: %d lines were not batch requests and were copied unchanged\n", bad)
		return exitFailure
	}
	return exitOK
}

// lineStats is what stats learns from a file.
type lineStats struct {
	lines, blank, requests int
	endpoints, models      map[string]int
	invalid                []string // "line N: why"
	tokens, counted        int64
	countErrs              int
}

const maxInvalidShown = 20

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: batchd stats FILE [--model PATH]

Counts the lines of the batch file FILE, its endpoints and models, and lines
that are not batch requests (a JSON object with a url and a body object; run
batchd validate for every rule). With --model PATH (a .gguf file or a Hugging
Face directory, as native.models[].path) it estimates the prompt tokens with
that model's tokenizer and chat template. Exit status 1 when a line is invalid.

`)
		fs.PrintDefaults()
	}
	modelPath := fs.String("model", "", "model whose tokenizer counts the prompt tokens")
	tmpl := fs.String("chat-template", "", "chat template to count with instead of the model's (a builtin name or template text)")
	path, ok := fileArg(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	in, err := os.Open(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer in.Close()
	var pc *native.PromptCounter
	if *modelPath != "" {
		if pc, err = native.OpenPromptCounter(*modelPath, *tmpl); err != nil {
			return errorf(stderr, exitUsage, "%v", err)
		}
		defer pc.Close()
	}
	st := lineStats{endpoints: map[string]int{}, models: map[string]int{}}
	invalid := func(n int, why string) {
		st.invalid = append(st.invalid, fmt.Sprintf("line %d: %s", n, why))
	}
	err = eachLine(in, func(n int, line []byte) error {
		st.lines++
		if len(bytes.TrimSpace(line)) == 0 {
			st.blank++
			return nil
		}
		var l struct {
			URL  *string         `json:"url"`
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			invalid(n, "not a JSON object")
			return nil
		}
		var b struct {
			Model *string `json:"model"`
		}
		switch {
		case l.URL == nil:
			invalid(n, "no url")
			return nil
		case len(l.Body) == 0 || l.Body[0] != '{' || json.Unmarshal(l.Body, &b) != nil:
			invalid(n, "body is not a JSON object")
			return nil
		}
		st.requests++
		st.endpoints[*l.URL]++
		model := "(none)"
		if b.Model != nil {
			model = *b.Model
		}
		st.models[model]++
		if pc != nil {
			k, err := pc.Count(*l.URL, l.Body)
			if err != nil {
				st.countErrs++
				if st.countErrs <= maxInvalidShown {
					fmt.Fprintf(stderr, "%s: line %d: prompt tokens not counted: %v\n", path, n, err)
				}
				return nil
			}
			st.tokens += int64(k)
			st.counted++
		}
		return nil
	})
	if err != nil {
		return errorf(stderr, exitFailure, "read %s: %v", path, err)
	}
	printStats(stdout, path, &st, *modelPath)
	if len(st.invalid) > 0 {
		return exitFailure
	}
	return exitOK
}

func printStats(w io.Writer, path string, st *lineStats, model string) {
	fmt.Fprintf(w, "%s: %d lines, %d requests", path, st.lines, st.requests)
	if st.blank > 0 {
		fmt.Fprintf(w, ", %d blank", st.blank)
	}
	fmt.Fprintf(w, ", %d invalid\n", len(st.invalid))
	counts := func(title string, m map[string]int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if m[keys[i]] != m[keys[j]] {
				return m[keys[i]] > m[keys[j]]
			}
			return keys[i] < keys[j]
		})
		fmt.Fprintf(w, "%s:\n", title)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-40s %d\n", k, m[k])
		}
	}
	counts("endpoints", st.endpoints)
	counts("models", st.models)
	switch {
	case model == "":
		fmt.Fprintln(w, "prompt tokens: give --model PATH to estimate them")
	default:
		fmt.Fprintf(w, "prompt tokens: %d (estimated with the tokenizer of %s, over %d of %d requests)\n",
			st.tokens, model, st.counted, st.requests)
	}
	for i, s := range st.invalid {
		if i == maxInvalidShown {
			fmt.Fprintf(w, "  ... and %d more invalid lines\n", len(st.invalid)-i)
			break
		}
		if i == 0 {
			fmt.Fprintln(w, "invalid lines:")
		}
		fmt.Fprintf(w, "  %s\n", s)
	}
}

func cmdSplit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("split", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: batchd split FILE --lines N

Splits the batch file NAME.jsonl into NAME.1.jsonl, NAME.2.jsonl, ... beside
it, each with N lines (the last with the rest; blank lines are dropped), and
copies NAME.options.json to each part's options file when there is one. It
refuses to start when any file it would write exists. Prints each file written.

`)
		fs.PrintDefaults()
	}
	n := fs.Int("lines", 0, "lines per part")
	path, ok := fileArg(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if *n < 1 {
		return errorf(stderr, exitUsage, "split: --lines must be a positive number of lines, got %d", *n)
	}
	name, ok := strings.CutSuffix(path, filecontract.SuffixJSONL)
	if !ok {
		return errorf(stderr, exitUsage, "split: %s: a batch file must end in %s", path, filecontract.SuffixJSONL)
	}
	opts, err := os.ReadFile(name + filecontract.SuffixOptions)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errorf(stderr, exitUsage, "%v", err)
	}
	in, err := os.Open(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer in.Close()
	// A first pass counts the parts, so no file is written when one exists.
	total := 0
	if err := eachLine(in, func(_ int, line []byte) error {
		if len(bytes.TrimSpace(line)) > 0 {
			total++
		}
		return nil
	}); err != nil {
		return errorf(stderr, exitFailure, "read %s: %v", path, err)
	}
	if total == 0 {
		return errorf(stderr, exitUsage, "split: %s has no lines", path)
	}
	parts := (total + *n - 1) / *n
	part := func(i int) string { return name + "." + strconv.Itoa(i) + filecontract.SuffixJSONL }
	for i := 1; i <= parts; i++ {
		targets := []string{part(i)}
		if opts != nil {
			targets = append(targets, name+"."+strconv.Itoa(i)+filecontract.SuffixOptions)
		}
		for _, t := range targets {
			if _, err := os.Lstat(t); err == nil {
				return errorf(stderr, exitUsage, "split: %s exists: remove it first (nothing was written)", t)
			}
		}
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return errorf(stderr, exitFailure, "read %s: %v", path, err)
	}
	// Options go first, so a daemon watching the directory never runs a
	// part without them.
	if opts != nil {
		for i := 1; i <= parts; i++ {
			af, err := createAtomic(name + "." + strconv.Itoa(i) + filecontract.SuffixOptions)
			if err == nil {
				af.w.Write(opts)
				err = af.commit(false)
			}
			if err != nil {
				return errorf(stderr, exitFailure, "split: %v", err)
			}
		}
	}
	var cur *atomicFile
	idx, inPart, seen := 0, 0, 0
	finish := func() error {
		if cur == nil {
			return nil
		}
		err := cur.commit(false)
		if err == nil {
			fmt.Fprintln(stdout, cur.path)
		}
		cur = nil
		return err
	}
	err = eachLine(in, func(_ int, line []byte) error {
		if len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
		if seen++; seen > total {
			return fmt.Errorf("%s grew while it was split", path)
		}
		if cur == nil {
			idx++
			var err error
			if cur, err = createAtomic(part(idx)); err != nil {
				return err
			}
			inPart = 0
		}
		cur.w.Write(line)
		if err := cur.w.WriteByte('\n'); err != nil {
			return err
		}
		if inPart++; inPart == *n {
			return finish()
		}
		return nil
	})
	if err == nil {
		err = finish()
	}
	if err != nil {
		if cur != nil {
			cur.abort()
		}
		return errorf(stderr, exitFailure, "split %s: %v", path, err)
	}
	return exitOK
}
