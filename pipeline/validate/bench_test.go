package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// benchLine is a typical chat line, about 300 bytes.
const benchLine = `{"custom_id":"request-000123","method":"POST","url":"/v1/chat/completions","body":{"model":"llama-3.1-8b-instruct","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarize the plot of Hamlet in two sentences, please."}],"temperature":0.7,"max_tokens":256}}`

// BenchmarkCheck checks a typical line under a fresh custom_id each time (as
// in a real file), with and without batch defaults to merge.
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"plain", Config{}},
		{"defaults", Config{Defaults: map[string]json.RawMessage{
			"max_tokens": json.RawMessage(`512`), "top_p": json.RawMessage(`0.9`), "seed": json.RawMessage(`1`),
		}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Lines with distinct ids, prepared up front.
			const distinct = 1 << 16
			lines := make([][]byte, distinct)
			for i := range lines {
				lines[i] = []byte(strings.Replace(benchLine, "request-000123", fmt.Sprintf("request-%06d", i), 1))
			}
			b.SetBytes(int64(len(benchLine)))
			b.ReportAllocs()
			c := NewChecker(bc.cfg)
			i := 0
			for b.Loop() {
				if i == distinct {
					c = NewChecker(bc.cfg)
					i = 0
				}
				if res := c.Check(i+1, lines[i]); res.Problem != nil {
					b.Fatal(res)
				}
				i++
			}
		})
	}
}

// BenchmarkLineReader reads a file of typical lines.
func BenchmarkLineReader(b *testing.B) {
	const lines = 10000
	input := bytes.Repeat([]byte(benchLine+"\n"), lines)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		lr := NewLineReader(bytes.NewReader(input), 0)
		n := 0
		for {
			_, _, _, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != lines {
			b.Fatalf("read %d lines", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkPipeline is LineReader and Checker together, per line.
func BenchmarkPipeline(b *testing.B) {
	const lines = 10000
	var buf bytes.Buffer
	for i := range lines {
		buf.WriteString(strings.Replace(benchLine, "request-000123", fmt.Sprintf("request-%06d", i), 1))
		buf.WriteByte('\n')
	}
	input := buf.Bytes()
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		lr := NewLineReader(bytes.NewReader(input), 0)
		c := NewChecker(Config{})
		for {
			n, raw, _, err := lr.Next()
			if err != nil {
				break
			}
			if res := c.Check(n, raw); res.Problem != nil {
				b.Fatal(res)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}

// BenchmarkDocReader reads a requests document of shorthand requests.
func BenchmarkDocReader(b *testing.B) {
	const requests = 10000
	var buf bytes.Buffer
	buf.WriteString(`{"defaults":{"max_tokens":256},"system_prompt":"You are a helpful assistant.","requests":[`)
	for i := range requests {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"custom_id":"r%d","messages":[{"role":"user","content":"Summarize the plot of Hamlet in two sentences, please."}],"temperature":0.7}`, i)
	}
	buf.WriteString(`]}`)
	input := buf.Bytes()
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		d := NewDocReader(bytes.NewReader(input), 0)
		n := 0
		for {
			_, _, _, err := d.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != requests {
			b.Fatalf("read %d requests", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*requests), "ns/request")
}
