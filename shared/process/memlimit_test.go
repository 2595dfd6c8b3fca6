package process

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func TestByteSize_SetAndString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		str  string
	}{
		{"0", 0, "0"}, {"12MiB", 12 << 20, "12MiB"}, {"1536 KiB", 1536 << 10, "1536KiB"},
		{"2GiB", 2 << 30, "2GiB"}, {"1000", 1000, "1000B"}, {"4096B", 4096, "4KiB"},
	} {
		var b ByteSize
		if err := b.Set(tc.in); err != nil || b != tc.want || b.String() != tc.str {
			t.Errorf("Set(%q) = %d %q, %v; want %d %q", tc.in, b, b.String(), err, tc.want, tc.str)
		}
	}
	for _, bad := range []string{"", "-1MiB", "12MB", "x", "9999999999GiB"} {
		b := ByteSize(7)
		if err := b.Set(bad); err == nil || b != 7 {
			t.Errorf("Set(%q) = %d, %v; want an error and the size unchanged", bad, b, err)
		}
	}
}

// TestMain_MemoryLimit: the process's default limit is set before run, a
// flag overrides it, 0 sets none, and $GOMEMLIMIT beats the default but
// not the flag.
func TestMain_MemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	MemoryLimits["memtest"] = 20 << 20
	defer delete(MemoryLimits, "memtest")
	for _, tc := range []struct {
		name, env string
		args      []string
		want      int64
	}{
		{name: "default", want: 20 << 20},
		{name: "flag", args: []string{"-memory-limit", "30MiB"}, want: 30 << 20},
		{name: "none", args: []string{"-memory-limit", "0"}, want: math.MaxInt64},
		{name: "environment over the default", env: "64MiB", want: 64 << 20},
		{name: "flag over the environment", env: "64MiB", args: []string{"-memory-limit", "30MiB"}, want: 30 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.env)
			// What the runtime read from $GOMEMLIMIT at its start.
			debug.SetMemoryLimit(map[bool]int64{false: math.MaxInt64, true: 64 << 20}[tc.env != ""])
			var f Flags
			fs := flag.NewFlagSet("memtest", flag.ContinueOnError)
			f.Register(fs, "memtest")
			var got int64
			code := mainWith(fs, tc.args, &f, io.Discard, &bytes.Buffer{}, func(context.Context, *slog.Logger) error {
				got = debug.SetMemoryLimit(-1)
				return nil
			})
			if code != 0 || got != tc.want {
				t.Errorf("exit %d, memory limit %d; want 0, %d", code, got, tc.want)
			}
		})
	}
}

// TestMain_GCPercent: the default GC percentage is set before run, a flag
// overrides it, and $GOGC beats the default but not the flag.
func TestMain_GCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		name, env string
		args      []string
		want      int
	}{
		{name: "default", want: DefaultGCPercent},
		{name: "flag", args: []string{"-gc-percent", "25"}, want: 25},
		{name: "off", args: []string{"-gc-percent", "-1"}, want: -1},
		{name: "environment over the default", env: "80", want: 80},
		{name: "flag over the environment", env: "80", args: []string{"-gc-percent", "25"}, want: 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			// What the runtime read from $GOGC at its start.
			debug.SetGCPercent(map[bool]int{false: 100, true: 80}[tc.env != ""])
			var f Flags
			fs := flag.NewFlagSet("gctest", flag.ContinueOnError)
			f.Register(fs, "gctest")
			var got int
			code := mainWith(fs, tc.args, &f, io.Discard, &bytes.Buffer{}, func(context.Context, *slog.Logger) error {
				got = debug.SetGCPercent(100)
				return nil
			})
			if code != 0 || got != tc.want {
				t.Errorf("exit %d, GC percent %d; want 0, %d", code, got, tc.want)
			}
		})
	}
}
