package cuda

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// TestLaunchParamsPack reads each packed parameter back the way
// cuLaunchKernel does, through kernelParams[i], Size bytes.
func TestLaunchParamsPack(t *testing.T) {
	args := []Arg{Ptr(0x7f00_dead_beef), I32(-3), U32(0xffff_fffe), I64(-1 << 40), U64(1<<63 | 5), F32(1.5)}
	want := [][]byte{
		le64(0x7f00_dead_beef), le32(uint32(0xffff_fffd)), le32(0xffff_fffe),
		le64(uint64(0xffff_ff00_0000_0000)), le64(1<<63 | 5), le32(math.Float32bits(1.5)),
	}
	var p launchParams
	kp, err := p.pack(args)
	if err != nil {
		t.Fatal(err)
	}
	ptrs := unsafe.Slice((*unsafe.Pointer)(kp), len(args))
	for i, a := range args {
		got := unsafe.Slice((*byte)(ptrs[i]), a.Size)
		if string(got) != string(want[i]) {
			t.Errorf("param %d: got % x, want % x", i, got, want[i])
		}
	}
	// A second, shorter pack reuses the same memory.
	kp2, err := p.pack([]Arg{I32(7)})
	if err != nil || kp2 != kp || *(*int32)(unsafe.Slice((*unsafe.Pointer)(kp2), 1)[0]) != 7 {
		t.Fatalf("repack: %v, %p vs %p", err, kp2, kp)
	}
}

func TestLaunchParamsNoArgs(t *testing.T) {
	var p launchParams
	if kp, err := p.pack(nil); err != nil || kp != nil {
		t.Fatalf("got %p, %v; want nil kernelParams", kp, err)
	}
}

func TestLaunchParamsRefused(t *testing.T) {
	var p launchParams
	for _, tc := range []struct {
		name string
		args []Arg
		want string
	}{
		{"size", []Arg{{Size: 2, Bits: 1}}, "size 2, want 4 or 8"},
		{"high bits", []Arg{I32(1), {Size: 4, Bits: 1 << 32}}, "argument 1: a 4-byte value"},
		{"too many", make([]Arg, maxLaunchArgs+1), "at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.pack(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
