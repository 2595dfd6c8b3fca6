package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"
)

// Profiles, when Options.ProfileDir is set: CPU profiles of the control
// plane's process (its apiserver's /debug/pprof: the apiserver, the
// controller-manager and the scheduler share the process) and of this
// process (every simulated node's dra), and the control plane's
// goroutines, during the change and each scheduling kind, and both
// processes' heaps at the change's end (and guardMemory's). They are
// evidence for the report's causes, not figures of it.

// profileChange profiles the change: the control plane for 30 s from now,
// this process until the returned stop, which also writes both heaps; both
// processes' goroutines are dumped changeDumpAfter from now, when most
// nodes wait on their writes.
func profileChange(ctx context.Context, w *world, o Options) (stop func()) {
	if o.ProfileDir == "" {
		return func() {}
	}
	base := filepath.Join(o.ProfileDir, fmt.Sprintf("n%d-change", o.Nodes))
	go cpProfile(ctx, w, 30*time.Second, base+"-cp.pprof")
	go after(ctx, changeDumpAfter, func() {
		cpGet(ctx, w, "/debug/pprof/goroutine", map[string]string{"debug": "1"}, 30*time.Second, base+"-cp-goroutines.txt")
		if f, err := os.Create(base + "-sim-goroutines.txt"); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			_ = f.Close()
		}
	})
	f, err := os.Create(base + "-sim.pprof")
	if err != nil {
		o.Logger.Warn("profile", "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		o.Logger.Warn("profile", "err", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		writeHeaps(ctx, w, base)
	}
}

// writeHeaps writes the control plane's heap profile and this process's
// to base-cp-heap.pprof and base-sim-heap.pprof; a failure is logged.
func writeHeaps(ctx context.Context, w *world, base string) {
	cpGet(ctx, w, "/debug/pprof/heap", nil, 30*time.Second, base+"-cp-heap.pprof")
	f, err := os.Create(base + "-sim-heap.pprof")
	if err == nil {
		err = errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
	}
	if err != nil {
		w.o.Logger.Warn("heap profile", "err", err)
	}
}

// profileKind profiles the control plane for 20 s from now and dumps its
// goroutines 10 s from now.
func profileKind(ctx context.Context, w *world, o Options, kind string) (stop func()) {
	if o.ProfileDir == "" {
		return func() {}
	}
	name := strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "").Replace(kind)
	base := filepath.Join(o.ProfileDir, fmt.Sprintf("n%d-%s", o.Nodes, name))
	ctx, cancel := context.WithCancel(ctx)
	go cpProfile(ctx, w, 20*time.Second, base+"-cp.pprof")
	go after(ctx, 10*time.Second, func() {
		cpGet(ctx, w, "/debug/pprof/goroutine", map[string]string{"debug": "1"}, 30*time.Second, base+"-goroutines.txt")
	})
	return cancel
}

// changeDumpAfter is how long into the change profileChange dumps the
// goroutines.
const changeDumpAfter = 20 * time.Second

// after runs f once d has passed, unless ctx ends first.
func after(ctx context.Context, d time.Duration, f func()) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
		f()
	}
}

func cpProfile(ctx context.Context, w *world, d time.Duration, path string) {
	cpGet(ctx, w, "/debug/pprof/profile", map[string]string{"seconds": fmt.Sprint(int(d.Seconds()))}, d+time.Minute, path)
}

// cpGet writes the apiserver's answer at path to file; a failure is
// logged and leaves no file.
func cpGet(ctx context.Context, w *world, path string, params map[string]string, timeout time.Duration, file string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := w.c.CoreV1().RESTClient().Get().AbsPath(path)
	for k, v := range params {
		req = req.Param(k, v)
	}
	raw, err := req.DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(file, raw, 0o644)
	}
	if err != nil {
		w.o.Logger.Warn("control plane profile", "path", path, "err", err)
	}
}
