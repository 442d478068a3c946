package tokenizer

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestStories260KEncode(t *testing.T) {
	tok := storiesTokenizer(t)
	if got := tok.VocabSize(); got != 512 {
		t.Fatalf("VocabSize = %d, want 512", got)
	}
	for _, tc := range []struct {
		text       string
		addSpecial bool
		want       []int32
	}{
		{"Once upon a time", true, []int32{1, 403, 407, 261, 378}},
		{"Once upon a time", false, []int32{403, 407, 261, 378}},
		{"", true, []int32{1}},
		{"", false, nil},
	} {
		got := tok.Encode(tc.text, tc.addSpecial, false)
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q, %v) = %v, want %v", tc.text, tc.addSpecial, got, tc.want)
		}
	}
}

func readIDs(t *testing.T, path string) []int32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ids = append(ids, int32(n))
	}
	return ids
}

// The greedy sample decodes to exactly greedy_text_64.txt, whose last byte is
// the newline the file ends with (the ids end in "Lily", no newline token).
func TestStories260KDecodeGreedy(t *testing.T) {
	tok := storiesTokenizer(t)
	dir := os.Getenv(envStories)
	ids := readIDs(t, filepath.Join(dir, "greedy_ids_from_bos_64.txt"))
	if len(ids) != 64 {
		t.Fatalf("%d ids, want 64", len(ids))
	}
	wantFile, err := os.ReadFile(filepath.Join(dir, "greedy_text_64.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSuffix(string(wantFile), "\n")
	if got := tok.Decode(ids); got != want {
		t.Errorf("Decode(greedy ids) =\n%q\nwant\n%q", got, want)
	}
	// With the BOS the model started from, the text is the same (the
	// SentencePiece leading space goes either way).
	withBOS := append([]int32{1}, ids...)
	if got := tok.Decode(withBOS); got != want {
		t.Errorf("Decode(BOS + greedy ids) = %q, want %q", got, want)
	}
	// The stream decoder gives the same text.
	d := tok.NewDecoder()
	var sb strings.Builder
	for _, id := range withBOS {
		sb.WriteString(d.Next(id))
	}
	sb.WriteString(d.Flush())
	if sb.String() != want {
		t.Errorf("Decoder = %q, want %q", sb.String(), want)
	}
	// And the text encodes back to the ids the model produced.
	if got := tok.Encode(want, true, false); !reflect.DeepEqual(got, withBOS) {
		t.Errorf("Encode(greedy text) = %v, want %v", got, withBOS)
	}
}

// llama.cpp's tokenizer test vectors for the Qwen2 vocabulary: .inp holds
// cases separated by "\n__ggml_vocab_test__\n", .out one line of ids per case.
func readVocabVectors(t *testing.T) (inputs []string, want [][]int32) {
	t.Helper()
	dir := envDir(t, envVectors, "ggml-vocab-qwen2.gguf.inp and .out")
	inp, err := os.ReadFile(filepath.Join(dir, "ggml-vocab-qwen2.gguf.inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(dir, "ggml-vocab-qwen2.gguf.out"))
	if err != nil {
		t.Fatal(err)
	}
	inputs = strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	if inputs[len(inputs)-1] != "" {
		t.Fatalf(".inp does not end with a separator")
	}
	inputs = inputs[:len(inputs)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%d inputs but %d output lines", len(inputs), len(lines))
	}
	for i, l := range lines {
		var ids []int32
		for _, f := range strings.Fields(l) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf(".out line %d: %v", i+1, err)
			}
			ids = append(ids, int32(n))
		}
		want = append(want, ids)
	}
	return inputs, want
}

func TestQwen2Vectors(t *testing.T) {
	inputs, want := readVocabVectors(t)
	if len(inputs) != 43 {
		t.Errorf("%d cases, want 43", len(inputs))
	}
	for _, impl := range []struct {
		name string
		tok  func(testing.TB) *Tokenizer
	}{{"FromHF", qwen3Tokenizer}, {"New", qwen3GGUFTokenizer}} {
		t.Run(impl.name, func(t *testing.T) {
			tok := impl.tok(t)
			pass := 0
			for i, in := range inputs {
				got := tok.Encode(in, false, false)
				if len(got) == 0 && len(want[i]) == 0 || reflect.DeepEqual(got, want[i]) {
					pass++
				} else {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
				}
				if dec := tok.Decode(got); dec != in {
					t.Errorf("case %d: Decode(Encode(%q)) = %q", i, in, dec)
				}
			}
			t.Logf("%d/%d llama.cpp Qwen2 vectors pass", pass, len(inputs))
		})
	}
}
