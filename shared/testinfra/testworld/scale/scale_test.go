package scale

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
)

// netdraResources are the resources netdra's dra and operator write.
var netdraResources = []string{"resourceslices", "nodeconfigs", "events", "resourceclaims", "clusterconfigs"}

// TestScale_Smoke runs the whole simulation with a few nodes and short
// windows: every phase completes (the scheduling twice, the second time
// with the components' client limits raised), and netdra writes nothing
// at rest.
func TestScale_Smoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	o := options(t, 3, 20*time.Second, 10)
	o.Deadline = 3 * time.Minute
	o.ComponentQPS = 5000
	res, err := Run(context.Background(), o)
	t.Logf("figures: %+v", res)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.SchedPodsPerSec["1 VF claim (limits raised)"]; !ok || res.SchedComponentQPS != 5000 {
		t.Errorf("no scheduling round with the limits raised: %v", res.SchedPodsPerSec)
	}
	if res.OperatorRSSMiB == 0 || res.ChangeWrittenMaxS == 0 || res.WritesPerNodeHourAfterChange == nil {
		t.Errorf("operator RSS %.0f MiB, NodeConfigs written by %.1f s, writes after the change %v: want each measured",
			res.OperatorRSSMiB, res.ChangeWrittenMaxS, res.WritesPerNodeHourAfterChange)
	}
	for when, writes := range map[string]map[string]float64{"before the change": res.WritesPerNodeHour,
		"after the change (address pools)": res.WritesPerNodeHourAfterChange} {
		for k, v := range writes {
			for _, r := range netdraResources {
				if strings.HasPrefix(k, r) && v > 0 {
					t.Errorf("at rest %s, %s: %.0f writes per node per hour, want none", when, k, v)
				}
			}
		}
	}
}

// TestScale_Bench is make bench-scale's: one run per node count in
// $NETDRA_SCALE_NODES (space-separated), each recorded in
// $NETDRA_BENCH_OUT's scale records; it stops at the first count that
// fails, recording what broke. $NETDRA_SCALE_REST is the rest window
// (default 3m), $NETDRA_SCALE_PODS the pods of each kind (default 1000),
// $NETDRA_SCALE_COMPONENT_QPS the controller-manager's and scheduler's
// client rate of the second scheduling round (0 or unset: none),
// $NETDRA_SCALE_PROFILES a folder for CPU profiles (unset: none).
func TestScale_Bench(t *testing.T) {
	counts := strings.Fields(os.Getenv("NETDRA_SCALE_NODES"))
	if len(counts) == 0 {
		t.Skip("NETDRA_SCALE_NODES is not set (make bench-scale sets it)")
	}
	rest := 3 * time.Minute
	if s := os.Getenv("NETDRA_SCALE_REST"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("NETDRA_SCALE_REST: %v", err)
		}
		rest = d
	}
	pods := 1000
	if s := os.Getenv("NETDRA_SCALE_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("NETDRA_SCALE_PODS: %v", err)
		}
		pods = n
	}
	var qps float64
	if s := os.Getenv("NETDRA_SCALE_COMPONENT_QPS"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 {
			t.Fatalf("NETDRA_SCALE_COMPONENT_QPS: %q is not a rate", s)
		}
		qps = v
	}
	for _, c := range counts {
		n, err := strconv.Atoi(c)
		if err != nil {
			t.Fatalf("NETDRA_SCALE_NODES: %v", err)
		}
		o := options(t, n, rest, min(pods, n*32))
		o.ComponentQPS = qps
		o.ProfileDir = os.Getenv("NETDRA_SCALE_PROFILES")
		res, err := Run(context.Background(), o)
		t.Logf("N=%d figures: %+v", n, res)
		if rerr := figures.Record(figures.ScaleFile, res); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Errorf("N=%d: %v (larger counts not run)", n, err)
			return
		}
	}
}

func options(t *testing.T, nodes int, rest time.Duration, pods int) Options {
	t.Helper()
	src, err := controlplane.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	// Sockets go under the run's folder: a short path.
	dir, err := os.MkdirTemp("", "nsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The nodes' sockets and state stores on tmpfs when there is one:
	// node-local files, which a real node keeps on its own disk.
	nodeDir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if nodeDir, err = os.MkdirTemp("/dev/shm", "nsc"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(nodeDir) })
	}
	level := slog.LevelWarn
	if os.Getenv("NETDRA_SCALE_DEBUG") != "" {
		level = slog.LevelInfo
	}
	nodeLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return Options{Nodes: nodes, PFs: 2, VFsPerPF: 32, RestWindow: rest, Settle: max(rest/6, 10*time.Second), Pods: pods,
		Dir: dir, NodeDir: nodeDir, RepoDir: filepath.Join(src, "..", "..", ".."), StartParallel: 8, StartWait: time.Minute, Deadline: 10 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), NodeLog: nodeLog}
}
