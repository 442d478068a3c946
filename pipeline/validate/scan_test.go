package validate

import (
	"testing"
)

func TestMembers(t *testing.T) {
	tests := []struct {
		name string
		obj  string
		want []string // key=value pairs, keys unquoted
	}{
		{"empty", `{}`, nil},
		{"spaces", " { \"a\" : 1 ,\n\"b\":\t[1, {\"c\":\"]\"}] } ", []string{`a=1`, `b=[1, {"c":"]"}]`}},
		{"escaped quotes", `{"k\"":"v\\","x":"\\\"}"}`, []string{`k"="v\\"`, `x="\\\"}"`}},
		{"escaped key", `{"\u0061":true}`, []string{`a=true`}},
		{"literals and numbers", `{"a":null,"b":-1.5e3,"c":false}`, []string{`a=null`, `b=-1.5e3`, `c=false`}},
		{"nested braces in strings", `{"a":"{[","b":{"c":"}"}}`, []string{`a="{["`, `b={"c":"}"}`}},
		{"not an object", `[1]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			b := []byte(tt.obj)
			for it := newMembers(b); ; {
				k, vs, ve, ok := it.next()
				if !ok {
					break
				}
				key, ok := unquote(k)
				if !ok {
					t.Fatalf("unquote(%s) failed", k)
				}
				got = append(got, string(key)+"="+string(b[vs:ve]))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestElements(t *testing.T) {
	tests := []struct {
		arr  string
		want []string
	}{
		{`[]`, nil},
		{`[ ]`, nil},
		{`[1, "a,b" ,[2,3],{"x":[]} , null]`, []string{`1`, `"a,b"`, `[2,3]`, `{"x":[]}`, `null`}},
		{`{}`, nil},
	}
	for _, tt := range tests {
		var got []string
		for it := newElements([]byte(tt.arr)); ; {
			el, ok := it.next()
			if !ok {
				break
			}
			got = append(got, string(el))
		}
		if len(got) != len(tt.want) {
			t.Fatalf("%s: got %q, want %q", tt.arr, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("%s: got %q, want %q", tt.arr, got, tt.want)
			}
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		st   intStatus
	}{
		{"0", 0, intOK},
		{"-7", -7, intOK},
		{"2.0", 2, intOK},
		{"2e3", 2000, intOK},
		{"2.5", 0, intNotInteger},
		{"1e-1", 0, intNotInteger},
		{"9223372036854775807", 9223372036854775807, intOK},
		{"9223372036854775808", 0, intOverflow},
		{"-9223372036854775808", -9223372036854775808, intOK},
		{"1e19", 0, intOverflow},
		{"1e400", 0, intOverflow},
		{`"2"`, 0, intNotNumber},
		{"true", 0, intNotNumber},
		{"null", 0, intNotNumber},
	}
	for _, tt := range tests {
		if got, st := parseInt([]byte(tt.in)); got != tt.want || st != tt.st {
			t.Errorf("parseInt(%s) = %d, %d; want %d, %d", tt.in, got, st, tt.want, tt.st)
		}
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`"abc"`, "abc", true},
		{`""`, "", true},
		{`"a\nb\u00e9\ud83d\ude00"`, "a\nbé😀", true},
		{`abc`, "", false},
		{`"`, "", false},
	}
	for _, tt := range tests {
		got, ok := unquote([]byte(tt.in))
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("unquote(%s) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
