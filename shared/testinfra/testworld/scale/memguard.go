package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// errOutOfMemory is the cause of a run that guardMemory stopped.
var errOutOfMemory = errors.New("the machine's memory ran out")

// memFloorMiB is the MemAvailable under which guardMemory stops a run: the
// machine has no swap, and below it the kernel evicts the binaries' pages
// and every process of the run crawls, so that nothing after it measures
// netdra.
const memFloorMiB = 2048

// guardMemory watches the machine's available memory every 2 s until ctx
// ends. When it falls under memFloorMiB it writes the control plane's and
// this process's heap profiles to o.ProfileDir (when set) and stops the
// run through stop, with a cause that names the two processes' RSS: a
// run recorded as broken by memory, which is the finding at that N.
func guardMemory(ctx context.Context, w *world, o Options, stop context.CancelCauseFunc) {
	tick := time.NewTicker(2 * time.Second)
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
		if o.ProfileDir != "" {
			writeHeaps(ctx, w, filepath.Join(o.ProfileDir, fmt.Sprintf("n%d-oom", o.Nodes)))
		}
		cp, _ := readProc(w.cp.PID())
		sim, _ := readProc(os.Getpid())
		stop(fmt.Errorf("%w: %.0f MiB available, the control plane's process at %.0f MiB of RSS, the simulation's at %.0f MiB",
			errOutOfMemory, avail, cp.rss, sim.rss))
		return
	}
}

// memAvailableMiB is /proc/meminfo's MemAvailable.
func memAvailableMiB() (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
