package process

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimits are the node processes' default soft memory limits (the Go
// runtime's, debug.SetMemoryLimit); a process not listed has none. The
// limit bounds what the runtime manages (heap, stacks, its own
// structures), not the binary's code and data, whose pages are most of an
// idle process's RSS. Without a limit a process under churn lets its heap
// grow to twice what it holds (GOGC=100) and keeps the pages; under one
// the collector runs sooner instead, and a process that holds more is not
// stopped, it collects more often (the runtime caps that at about half a
// CPU).
//
// None is set by default: a limit near what a process holds makes it
// collect all the time, which slows the attach pipeline under churn (the
// provisioner allocates fast: link dumps of every host link). -memory-limit
// (or $GOMEMLIMIT) trades that speed for memory where memory matters more.
var MemoryLimits = map[string]ByteSize{}

// ByteSize is a flag.Value holding a size in bytes, written as a number
// with an optional unit: B, KiB, MiB, GiB (1024-based); 0 is none.
type ByteSize int64

// Set parses s; on error the size is left unchanged.
func (b *ByteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("size %q: want a non-negative number of B, KiB, MiB or GiB", s)
	}
	*b = ByteSize(n * mult)
	return nil
}

// String writes the size in the largest unit that divides it.
func (b *ByteSize) String() string {
	if b == nil || *b == 0 {
		return "0"
	}
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// applyMemoryLimit sets the runtime's soft memory limit to limit, unless
// limit is 0 or $GOMEMLIMIT sets one and the flag was not given (explicit
// beats the environment, the environment beats the default).
func applyMemoryLimit(limit ByteSize, flagGiven bool) {
	if limit <= 0 || (!flagGiven && os.Getenv("GOMEMLIMIT") != "") {
		return
	}
	debug.SetMemoryLimit(int64(limit))
}

// DefaultGCPercent is the node processes' GC target percentage unless
// -gc-percent or $GOGC says otherwise: half the runtime's 100, so that a
// process under churn grows its heap by half of what it holds, not all of
// it, before collecting. Unlike a memory limit near what a process holds,
// it scales with the live heap, so a process that holds more collects as
// often, not all the time.
const DefaultGCPercent = 50

// applyGCPercent sets the runtime's GC percentage to percent, unless $GOGC
// sets one and the flag was not given (explicit beats the environment, the
// environment beats the default).
func applyGCPercent(percent int, flagGiven bool) {
	if !flagGiven && os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(percent)
}
