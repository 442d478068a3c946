package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText is ordinary prose with some code, numbers and non-Latin text.
var benchText = strings.Repeat(`Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big, red ball. She wanted to play with it, but it was too high. She asked her mom for help.
func main() { fmt.Println("hello, world", 42, 3.14159) } // prints 2024-11-29T12:00:00Z
Der schnelle braune Fuchs springt über den faulen Hund. 日本語のテキストも少し含まれています。🦙🚀
`, 20)

// BenchmarkEncode reports tokens/s. "warm" encodes the same text again and
// again (the byte-level word cache is hot, as for repeated prompt
// templates); "random" draws fresh random text each time (cache mostly cold).
func BenchmarkEncode(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	var random []string
	for i := 0; i < 256; i++ {
		random = append(random, randomText(rng, 400))
	}
	for _, nt := range allTokenizers {
		for _, mode := range []string{"warm", "random"} {
			b.Run(nt.name+"/"+mode, func(b *testing.B) {
				tok := nt.get(b)
				var bytes, tokens int
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					text := benchText
					if mode == "random" {
						text = random[i%len(random)]
					}
					tokens += len(tok.Encode(text, true, false))
					bytes += len(text)
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(bytes)/1e6/b.Elapsed().Seconds(), "MB/s")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, nt := range allTokenizers {
		b.Run(nt.name, func(b *testing.B) {
			tok := nt.get(b)
			ids := tok.Encode(benchText, true, false)
			var n int
			for b.Loop() {
				d := tok.NewDecoder()
				for _, id := range ids {
					n += len(d.Next(id))
				}
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkFromHF is the load time of Qwen3's 11 MB tokenizer.json.
func BenchmarkFromHF(b *testing.B) {
	dir := envDir(b, envQwen3, "Qwen3's tokenizer.json")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := FromHF(tj, nil); err != nil {
			b.Fatal(err)
		}
	}
}
