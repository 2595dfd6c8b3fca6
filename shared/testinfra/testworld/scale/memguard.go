package scale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// errOutOfMemory is the cause of a run that guardMemory stopped.
var errOutOfMemory = errors.New("the machine's memory ran out")

// memFloorMiB is the MemAvailable under which guardMemory stops a run: the
// machine has no swap, and below it the kernel evicts the binaries' pages
// and every process of the run crawls, so that nothing after it measures
// netdra (and the run may not even stop in time).
const memFloorMiB = 3072

// guardMemory watches the machine's available memory every second until
// ctx ends. When it falls under memFloorMiB it stops the run through
// stop, with a cause that names the control plane's and this process's
// RSS (a run recorded as broken by memory, which is the finding at that
// N), and then writes both processes' heap profiles to o.ProfileDir (when
// set), while the run winds down.
func guardMemory(ctx context.Context, w *world, o Options, stop context.CancelCauseFunc) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		avail, err := memAvailableMiB()
		if err != nil || avail >= memFloorMiB {
			continue
		}
		cp, cpErr := readProc(w.cp.PID())
		sim, simErr := readProc(os.Getpid())
		if err := errors.Join(cpErr, simErr); err != nil {
			o.Logger.Warn("reading the processes' RSS", "err", err)
		}
		stop(fmt.Errorf("%w: %.0f MiB available, the control plane's process at %.0f MiB of RSS, the simulation's at %.0f MiB",
			errOutOfMemory, avail, cp.rss, sim.rss))
		if o.ProfileDir != "" {
			writeHeaps(context.WithoutCancel(ctx), w, filepath.Join(o.ProfileDir, fmt.Sprintf("n%d-oom", o.Nodes)))
		}
		return
	}
}

// memAvailableMiB is /proc/meminfo's MemAvailable.
func memAvailableMiB() (float64, error) { return meminfoMiB("MemAvailable") }

// meminfoMiB is one field of /proc/meminfo.
func meminfoMiB(field string) (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no %s", field)
}

// limitSimMemory gives this process (the simulation) a soft memory limit
// of a third of the machine's memory, once, unless it had one
// (GOMEMLIMIT), and returns the limit it set in MiB (0: none). Its garbage
// collector then keeps its RSS near its live heap instead of letting it
// grow to twice that, which at large N is memory the control plane's
// process needs; it is the simulation's own memory, not a figure of
// netdra's.
var limitSimMemory = sync.OnceValue(func() float64 {
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		return 0
	}
	total, err := meminfoMiB("MemTotal")
	if err != nil {
		return 0
	}
	debug.SetMemoryLimit(int64(total / 3 * (1 << 20)))
	return total / 3
})
