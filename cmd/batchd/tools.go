package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/validate"
)

// inputFormat tells a batch input's format and name from its file name.
func inputFormat(path string) (name, format string, err error) {
	base := filepath.Base(path)
	switch {
	case strings.HasSuffix(base, filecontract.SuffixOptions):
		return "", "", fmt.Errorf("%s is an options file, not a batch input", base)
	case strings.HasSuffix(base, filecontract.SuffixJSONL):
		return strings.TrimSuffix(base, filecontract.SuffixJSONL), filecontract.FormatJSONL, nil
	case strings.HasSuffix(base, filecontract.SuffixJSON):
		return strings.TrimSuffix(base, filecontract.SuffixJSON), filecontract.FormatJSON, nil
	}
	return "", "", fmt.Errorf("%s: a batch input must end in .jsonl (OpenAI batch lines) or .json (a requests document)", base)
}

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	optsPath := fs.String("options", "", "batch options file (default: NAME.options.json beside FILE, if present)")
	maxLine := fs.Int("max-line-bytes", 32<<20, "longest line accepted")
	quiet := fs.Bool("q", false, "print only the summary")
	model := fs.String("model", "", "check as the native engine serving this model would (its model when a line names none), refusing what it does not honour")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: batchd validate [--options FILE] [--model NAME] FILE")
		return exitUsage
	}
	path := fs.Arg(0)
	name, format, err := inputFormat(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	if *optsPath == "" {
		*optsPath = filepath.Join(filepath.Dir(path), name+filecontract.SuffixOptions)
	} else if _, err := os.Stat(*optsPath); err != nil {
		return errorf(stderr, exitUsage, "options: %v", err)
	}
	opts, _, err := pipeline.ReadOptionsFile(*optsPath)
	if err == nil {
		err = opts.Validate()
	}
	if *model != "" && opts.Model == "" {
		opts.Model = *model
	}
	cfg := opts.CheckerConfig()
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return errorf(stderr, exitUsage, "options: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer f.Close()
	var src validate.LineSource = validate.NewLineReader(f, *maxLine)
	if format == filecontract.FormatJSON {
		src = docReader(f, path, *maxLine)
	}
	chk := validate.NewChecker(cfg)
	total, invalid := 0, 0
	for {
		n, raw, tooLong, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errorf(stderr, exitUsage, "%s: %v", path, err)
		}
		total++
		var res validate.Result
		if tooLong {
			res = chk.TooLong(n, *maxLine)
		} else {
			res = chk.Check(n, raw)
			if res.Problem == nil && *model != "" {
				res.Problem = validate.CheckNative(res.Request)
			}
		}
		if res.Problem != nil {
			invalid++
			if !*quiet {
				fmt.Fprintln(stdout, res.String())
			}
		}
	}
	fmt.Fprintf(stdout, "%s: %d requests, %d valid, %d invalid\n", path, total, total-invalid, invalid)
	if invalid > 0 {
		return exitFailure
	}
	return exitOK
}

func dataFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("BATCHD_DATA")
	if def == "" {
		def = "./data"
	}
	return fs.String("data", def, "data directory")
}

func cmdSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := dataFlag(fs)
	wait := fs.Bool("wait", false, "wait for the batch to end, showing progress")
	optsPath := fs.String("options", "", "batch options file to submit with it (as NAME.options.json)")
	asName := fs.String("name", "", "batch name (default: the file name without its extension)")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: batchd submit [--data DIR] [--wait] [--options FILE] [--name NAME] FILE")
		return exitUsage
	}
	path := fs.Arg(0)
	name, format, err := inputFormat(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	if *asName != "" {
		name = *asName
	}
	dirs := daemon.DataDirs(*data)
	if err := os.MkdirAll(dirs.Inbox, 0o755); err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	// The options file goes first, so the batch never starts without it.
	if *optsPath != "" {
		if err := placeAtomically(*optsPath, filepath.Join(dirs.Inbox, name+filecontract.SuffixOptions)); err != nil {
			return errorf(stderr, exitUsage, "%v", err)
		}
	}
	started := time.Now()
	dst := filepath.Join(dirs.Inbox, name+"."+format)
	if err := placeAtomically(path, dst); err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	fmt.Fprintf(stdout, "submitted %s as batch %q (%s)\n", path, name, dst)
	if !*wait {
		return exitOK
	}
	return waitBatch(ctx, dirs, name, started, stdout, stderr)
}

// valueFlags are the flags that take a separate value argument.
var valueFlags = map[string]bool{"data": true, "options": true, "name": true, "max-line-bytes": true, "cache": true, "endpoint": true, "revision": true, "config": true, "source": true, "s3-endpoint": true, "timeout": true, "o": true}

// reorder moves flags before positional arguments so "submit FILE --wait" works.
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && valueFlags[strings.TrimLeft(a, "-")] {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

// placeAtomically copies src into dst through a dot-named temporary file and
// a rename, so the daemon never sees it half written.
func placeAtomically(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+filecontract.SuffixPart)
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// waitBatch follows NAME.batch.json until the batch ends.
func waitBatch(ctx context.Context, dirs daemon.Dirs, name string, since time.Time, stdout, stderr io.Writer) int {
	objPath := filepath.Join(dirs.Outbox, name+filecontract.SuffixBatch)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	waitingSaid := false
	tty := isTerminal(stderr)
	var lastPrint time.Time
	var lastLine string
	for {
		obj, err := pipeline.ReadBatchObject(objPath)
		fresh := err == nil && obj.Batchd.UpdatedAt >= since.Unix()
		if fresh {
			line := progressLine(obj)
			switch {
			case tty:
				fmt.Fprint(stderr, "\r"+line+"\033[K")
			case line != lastLine && (time.Since(lastPrint) >= 5*time.Second || pipeline.Terminal(obj.Status)):
				fmt.Fprintln(stderr, line)
				lastPrint, lastLine = time.Now(), line
			}
			if pipeline.Terminal(obj.Status) {
				if tty {
					fmt.Fprintln(stderr)
				}
				fmt.Fprintf(stdout, "batch %q %s: %d completed, %d failed\n", name, obj.Status, obj.RequestCounts.Completed, obj.RequestCounts.Failed)
				if obj.Errors != nil {
					for _, e := range obj.Errors.Data {
						line := ""
						if e.Line != nil {
							line = fmt.Sprintf("line %d: ", *e.Line)
						}
						fmt.Fprintf(stdout, "  %s%s: %s\n", line, e.Code, e.Message)
					}
					return exitFailure
				}
				fmt.Fprintf(stdout, "results: %s\nerrors:  %s\n", filepath.Join(dirs.Outbox, obj.Batchd.OutputFile), filepath.Join(dirs.Outbox, obj.Batchd.ErrorFile))
				if obj.Status != pipeline.StatusCompleted {
					return exitFailure
				}
				return exitOK
			}
		} else if !waitingSaid && time.Since(since) > 3*time.Second {
			fmt.Fprintf(stderr, "waiting for batchd to pick up %q (is `batchd run --data %s` running?)\n", name, dirs.Root)
			waitingSaid = true
		}
		select {
		case <-ctx.Done():
			return exitFailure
		case <-tick.C:
		}
	}
}

func progressLine(o *pipeline.BatchObject) string {
	c := o.RequestCounts
	done := c.Completed + c.Failed
	const width = 30
	fill := 0
	if c.Total > 0 {
		fill = done * width / c.Total
	}
	bar := strings.Repeat("█", fill) + strings.Repeat("░", width-fill)
	eta := "-"
	if o.Batchd.Rate > 0 && done < c.Total {
		eta = (time.Duration(float64(c.Total-done)/o.Batchd.Rate) * time.Second).Round(time.Second).String()
	}
	paused := ""
	if o.Batchd.Paused {
		paused = "  [engine unreachable: paused]"
	}
	return fmt.Sprintf("%s %s %d/%d  failed %d  %.1f req/s  ETA %s%s", o.Status, bar, done, c.Total, c.Failed, o.Batchd.Rate, eta, paused)
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := dataFlag(fs)
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() > 1 {
		fmt.Fprintln(stderr, "usage: batchd status [--data DIR] [NAME]")
		return exitUsage
	}
	dirs := daemon.DataDirs(*data)
	type row struct {
		name    string
		obj     *pipeline.BatchObject
		created int64
	}
	var rows []row
	seen := map[string]bool{}
	objs, _ := filepath.Glob(filepath.Join(dirs.Outbox, "*"+filecontract.SuffixBatch))
	for _, p := range objs {
		name := strings.TrimSuffix(filepath.Base(p), filecontract.SuffixBatch)
		if fs.NArg() == 1 && name != fs.Arg(0) {
			continue
		}
		obj, err := pipeline.ReadBatchObject(p)
		if err != nil {
			fmt.Fprintf(stderr, "batchd: %v\n", err)
			continue
		}
		seen[name] = true
		rows = append(rows, row{name, obj, obj.CreatedAt})
	}
	// Inputs waiting in the inbox that have no batch object yet: regular
	// files only (the daemon refuses links, FIFOs and the like, and leaves
	// directories alone).
	ents, _ := os.ReadDir(dirs.Inbox)
	for _, e := range ents {
		name, _, err := inputFormat(e.Name())
		if err != nil || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || seen[name] || (fs.NArg() == 1 && name != fs.Arg(0)) {
			continue
		}
		info, _ := e.Info()
		var mt int64
		if info != nil {
			mt = info.ModTime().Unix()
		}
		rows = append(rows, row{name: name, created: mt})
	}
	if fs.NArg() == 1 && len(rows) == 0 {
		return errorf(stderr, exitFailure, "no batch named %q in %s", fs.Arg(0), dirs.Root)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].created != rows[j].created {
			return rows[i].created < rows[j].created
		}
		return rows[i].name < rows[j].name
	})
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tDONE/TOTAL\tFAILED\tSTARTED\tRATE")
	for _, r := range rows {
		if r.obj == nil {
			fmt.Fprintf(tw, "%s\tqueued\t-\t-\t-\t-\n", r.name)
			continue
		}
		c := r.obj.RequestCounts
		started := "-"
		if r.obj.InProgressAt != nil {
			started = time.Unix(*r.obj.InProgressAt, 0).Local().Format("2006-01-02 15:04:05")
		}
		status := r.obj.Status
		if r.obj.Batchd.Paused && !pipeline.Terminal(status) {
			status += " (engine paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\t%.1f/s\n", r.name, status, c.Completed+c.Failed, c.Total, c.Failed, started, r.obj.Batchd.Rate)
	}
	tw.Flush()
	return exitOK
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := dataFlag(fs)
	configPath := fs.String("config", "", "YAML config file (its source: and s3: settings name the bucket)")
	source := fs.String("source", "", "check a bucket's batch: s3://BUCKET/PREFIX (credentials from BATCHD_S3_ACCESS_KEY/BATCHD_S3_SECRET_KEY, AWS_* or MINIO_ROOT_* variables)")
	endpoint := fs.String("s3-endpoint", "", "the bucket's server, host:port")
	tls := fs.Bool("s3-tls", false, "connect to the bucket's server with HTTPS")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: batchd check [--data DIR | --source s3://BUCKET/PREFIX --s3-endpoint HOST:PORT] NAME")
		return exitUsage
	}
	name := fs.Arg(0)
	var in pipeline.CheckInput
	cfg := daemon.DefaultConfig()
	if *configPath != "" {
		c, err := daemon.LoadFile(*configPath)
		if err != nil {
			return errorf(stderr, exitUsage, "%v", err)
		}
		cfg = c
	}
	if err := daemon.ApplyEnv(&cfg, os.Getenv); err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	if *source != "" {
		cfg.Source = *source
	}
	if *endpoint != "" {
		cfg.S3.Endpoint = *endpoint
	}
	if *tls {
		cfg.S3.TLS = true
	}
	if cfg.IsBucket() {
		tmp, err := os.MkdirTemp("", "batchd-check-")
		if err != nil {
			return errorf(stderr, exitFailure, "%v", err)
		}
		defer os.RemoveAll(tmp)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		in, err = daemon.FetchBucketBatch(cctx, cfg, name, tmp)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return errorf(stderr, exitUsage, "batch %q: %v", name, err)
			}
			return errorf(stderr, exitFailure, "%v", err)
		}
	} else {
		dirs := daemon.DataDirs(*data)
		in = pipeline.CheckInput{
			Output:  filepath.Join(dirs.Outbox, name+filecontract.SuffixOutput),
			Errors:  filepath.Join(dirs.Outbox, name+filecontract.SuffixErrors),
			Object:  filepath.Join(dirs.Outbox, name+filecontract.SuffixBatch),
			Results: filepath.Join(dirs.Outbox, name+filecontract.SuffixResults),
		}
		for _, dir := range []string{dirs.Done, dirs.Inbox} {
			for _, format := range []string{filecontract.FormatJSONL, filecontract.FormatJSON} {
				p := filepath.Join(dir, name+"."+format)
				if _, err := os.Stat(p); err == nil && in.Input == "" {
					in.Input, in.Format = p, format
				}
			}
		}
		if in.Input == "" {
			return errorf(stderr, exitUsage, "no input for batch %q in %s or %s", name, dirs.Done, dirs.Inbox)
		}
	}
	rep, err := pipeline.Check(in)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errorf(stderr, exitUsage, "batch %q has no results yet: %v", name, err)
		}
		return errorf(stderr, exitUsage, "%v", err)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, p)
	}
	if rep.ProblemsCapped > 0 {
		fmt.Fprintf(stdout, "... and %d more problems\n", rep.ProblemsCapped)
	}
	if !rep.OK() {
		fmt.Fprintf(stdout, "FAIL %s (%s): %d requests, %d output lines, %d error lines, %d problems\n",
			name, rep.Status, rep.Lines, rep.OutputLines, rep.ErrorLines, len(rep.Problems)+rep.ProblemsCapped)
		return exitFailure
	}
	fmt.Fprintf(stdout, "OK %s (%s): %d requests, each exactly once (%d output lines, %d error lines)\n",
		name, rep.Status, rep.Lines, rep.OutputLines, rep.ErrorLines)
	return exitOK
}

// isTerminal reports whether w is a character device (a terminal), where a
// redrawn progress line makes sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
