// Package scale is the scale simulation: a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler), netdra's real
// operator as its own process, and N simulated nodes: Node objects without
// a kubelet, each with netdra's real dra code for that node (simNode) over
// a simulated inventory. It measures what netdra costs the control plane:
// writes and watches per node at rest, a ClusterConfig change until every
// node applied it and republished, the operator's CPU and memory,
// scheduling throughput with and without netdra claims, etcd's size and
// the control plane's memory.
//
// The simulated nodes share one process: its Go runtime (scheduler,
// garbage collector), the read-only device inventory they are given and
// the log handler. Each has its own apiserver connection, clients,
// informers, watches, rate limiter, state service and agent, so the
// requests the apiserver sees are those of N separate dra processes; the
// process's own CPU and memory are reported apart, not as the control
// plane's.
package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Options configures Run.
type Options struct {
	Nodes int
	// PFs and VFsPerPF are each node's inventory.
	PFs, VFsPerPF int
	// RestWindow is how long writes at rest are counted with netdra; the
	// baseline (Nodes, no netdra) is counted for half as long.
	RestWindow time.Duration
	// Settle is how long after the start the rest window begins.
	Settle time.Duration
	// Pods is how many pods of each kind the scheduling phase creates; 0
	// skips it.
	Pods int
	// Dir is the run's folder (the control plane's data, the nodes'
	// sockets): short, since sockets go under it.
	Dir string
	// RepoDir is the netdra checkout (the operator is built from it).
	RepoDir string
	// StartParallel is how many nodes start at once: a node counts as
	// starting until its NodeConfig is applied and its slices published
	// (or StartWait has passed), so that no more than StartParallel
	// nodes' start-up bursts share the simulation's process.
	StartParallel int
	// StartWait bounds how long one node's start holds its place.
	StartWait time.Duration
	// Deadline bounds each wait for every node (startup, change).
	Deadline time.Duration
	// ComponentQPS, when positive, has the scheduling phase run again
	// with the controller-manager's and scheduler's client rate raised to
	// it (the control plane restarted).
	ComponentQPS float64
	// ProfileDir, when set, receives CPU profiles of the control plane
	// and of this process during the change and the scheduling.
	ProfileDir string
	// NodeDir is where the simulated nodes' sockets and state stores go
	// (tmpfs: node-local files, not what is measured); "" is Dir.
	NodeDir string
	Logger  *slog.Logger // progress
	NodeLog *slog.Logger // the simulated nodes' dra logs
}

// clusterConfigName is the ClusterConfig governing every simulated node.
const clusterConfigName = "scale"

// nodeLabel marks the simulated nodes.
const nodeLabel = "netdra.io/scale-sim"

// Run runs the simulation once and returns its figures; on a failure the
// figures measured so far come with the error (and Failure set).
func Run(ctx context.Context, o Options) (res figures.Scale, err error) {
	t0 := time.Now()
	log := o.Logger
	res = figures.Scale{Nodes: o.Nodes, Load: loadAvg(), Cores: runtime.NumCPU(),
		Inventory: fmt.Sprintf("%d PFs x %d VFs (sr-iov discovery of a fake sysfs tree), one pool", o.PFs, o.VFsPerPF),
		Shared: "one process holds every simulated node's dra: they share its Go runtime and the read-only inventory; " +
			"each has its own apiserver connection, clients, informers, rate limiter, state service and agent; " +
			fmt.Sprintf("the nodes start %d at a time, each holding its place until its NodeConfig is applied and its slices "+
				"published (at most %s), so that the start-up bursts of a few nodes, not of all, share the process's CPU "+
				"(a real node's dra has its own)", o.StartParallel, o.StartWait)}
	if lim := limitSimMemory(); lim > 0 {
		res.Shared += fmt.Sprintf("; the process runs with a soft memory limit of %.0f MiB (a third of the machine's; "+
			"GOMEMLIMIT), so that its RSS follows its live heap", lim)
	}
	defer func() {
		res.TotalS = time.Since(t0).Seconds()
		res.Load += " -> " + loadAvg()
		if err != nil {
			res.Failure = err.Error()
		}
	}()
	inv, err := Inventory(o.PFs, o.VFsPerPF)
	if err != nil {
		return res, err
	}
	w, err := startWorld(ctx, o)
	if err != nil {
		return res, err
	}
	defer w.stop()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go guardMemory(ctx, w, o, stop)
	defer func() {
		if c := context.Cause(ctx); err != nil && errors.Is(c, errOutOfMemory) {
			err = c
		}
	}()

	log.Info("creating the Nodes", "n", o.Nodes)
	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("sim-%04d", i)
	}
	if err := parallel(ctx, 16, names, func(ctx context.Context, n string) error { return createNode(ctx, w.c, n) }); err != nil {
		return res, fmt.Errorf("creating the Nodes: %w", err)
	}
	tr, err := newTracker(ctx, w.c, w.dc, len(inv))
	if err != nil {
		return res, err
	}

	// The baseline: the same Nodes, no netdra.
	time.Sleep(5 * time.Second)
	base := o.RestWindow / 2
	log.Info("baseline window (Nodes, no netdra)", "window", base)
	b0, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	cpBase, _ := readProc(w.cp.PID())
	res.CPBaselineRSSMiB = cpBase.rss
	res.EtcdBaselineBytes = b0.one("apiserver_storage_size_bytes")
	time.Sleep(base)
	b1, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	res.BaselineWrites = scaleMap(diff(b0.writes(), b1.writes()), float64(o.RestWindow)/float64(base))
	res.BaselineWatches = b1.watches()

	// netdra: the operator, the ClusterConfig, the nodes' dra.
	op, err := w.startOperator(ctx)
	if err != nil {
		return res, err
	}
	cc := &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: clusterConfigName}, Spec: v1alpha1.ClusterConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nodeLabel: "true"}},
		Spec: v1alpha1.NodeConfigSpec{
			DeviceManagerConfigs: &v1alpha1.DeviceManagerConfigs{SRIOV: &v1alpha1.SRIOVConfig{Enabled: true}},
			Pools:                []v1alpha1.Pool{{Name: "vf"}},
		}}}
	tr.expect("vf")
	s0, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	if err := w.cl.Create(ctx, cc); err != nil {
		return res, fmt.Errorf("creating the ClusterConfig: %w", err)
	}
	log.Info("starting the simulated nodes", "n", o.Nodes, "parallel", o.StartParallel)
	var (
		nodesMu sync.Mutex
		nodes   []*simNode
	)
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	err = parallel(ctx, o.StartParallel, names, func(ctx context.Context, name string) error {
		n, err := startNode(ctx, o.NodeLog, w.rc, name, filepath.Join(cmp.Or(o.NodeDir, o.Dir), "n", name[4:]), inv)
		if err != nil {
			return err
		}
		nodesMu.Lock()
		nodes = append(nodes, n)
		nodesMu.Unlock()
		// A node slower than StartWait still counts at waitAll below.
		tr.waitNode(ctx, name, o.StartWait)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("starting the simulated nodes: %w", err)
	}
	applied, published, err := waitAll(ctx, tr, o.Nodes, o.Deadline, log, "startup")
	if err != nil {
		return res, err
	}
	res.StartupS = max(maxOf(applied), maxOf(published)).Seconds()
	s1, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	res.StartupRequests = diff(s0.requests(), s1.requests())

	// At rest.
	log.Info("settling", "for", o.Settle)
	time.Sleep(o.Settle)
	r0, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	op0 := op.proc()
	exR0, _ := op.restarts()
	sim0, _ := readProc(os.Getpid())
	log.Info("rest window", "window", o.RestWindow)
	time.Sleep(o.RestWindow)
	r1, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	op1 := op.proc()
	sim1, _ := readProc(os.Getpid())
	cp1, _ := readProc(w.cp.PID())
	res.RestWindowS = o.RestWindow.Seconds()
	res.RestWrites = diff(r0.writes(), r1.writes())
	res.WritesPerNodeHour = map[string]float64{}
	for k, v := range diff(res.BaselineWrites, res.RestWrites) {
		res.WritesPerNodeHour[k] = v / float64(o.Nodes) * float64(time.Hour) / float64(o.RestWindow)
	}
	res.Watches = r1.watches()
	exR1, _ := op.restarts()
	res.OperatorRestCPUS = since(op0.cpu.Seconds(), op1.cpu.Seconds(), exR0, exR1)
	res.SimRestCPUS = (sim1.cpu - sim0.cpu).Seconds()
	res.SimRSSMiB = sim1.rss
	res.CPRSSMiB = cp1.rss
	res.CPHeapMiB = r1.one("go_memstats_heap_inuse_bytes") / (1 << 20)
	res.EtcdBytes = r1.one("apiserver_storage_size_bytes")
	res.EtcdObjects = r1.objects()

	// A ClusterConfig change: the pool split by PF and a cluster address
	// pool added (the operator carves a block per node).
	res.ChangeWhat = "pool vf split into pf0 and pf1 (by PF), and a cluster address pool of /26 blocks added"
	log.Info("ClusterConfig change", "what", res.ChangeWhat)
	opC0 := op.proc()
	om0, _ := op.metrics(ctx)
	ex0, _ := op.restarts()
	c0, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	cpC0, _ := readProc(w.cp.PID())
	simC0, _ := readProc(os.Getpid())
	stopProfiles := profileChange(ctx, w, o)
	tr.expect("pf0", "pf1")
	if err := retryConflict(ctx, func() error {
		var cur v1alpha1.ClusterConfig
		if err := w.cl.Get(ctx, client.ObjectKey{Name: clusterConfigName}, &cur); err != nil {
			return err
		}
		cur.Spec.Spec.Pools = []v1alpha1.Pool{
			{Name: "pf0", Filter: &v1alpha1.PoolFilter{PFNames: []string{"ens0f0"}}},
			{Name: "pf1", Filter: &v1alpha1.PoolFilter{PFNames: []string{"ens1f0"}}},
		}
		cur.Spec.AddressPools = []v1alpha1.AddressPool{{Name: "net-a", Subnet: "10.64.0.0/12", BlockPrefixLength: 26}}
		return w.cl.Update(ctx, &cur)
	}); err != nil {
		return res, fmt.Errorf("changing the ClusterConfig: %w", err)
	}
	applied, published, err = waitAll(ctx, tr, o.Nodes, o.Deadline, log, "change")
	stopProfiles()
	cpC1, _ := readProc(w.cp.PID())
	simC1, _ := readProc(os.Getpid())
	res.ChangeCPCPUS, res.ChangeSimCPUS = (cpC1.cpu - cpC0.cpu).Seconds(), (simC1.cpu - simC0.cpu).Seconds()
	opC1 := op.proc()
	om1, _ := op.metrics(ctx)
	if c1, serr := scrape(ctx, w.c); serr == nil {
		res.ChangeWrites = scaleMap(diff(c0.writes(), c1.writes()), 1/float64(o.Nodes))
		n0, t0, e0 := c0.sliceWrites()
		n1, t1, e1 := c1.sliceWrites()
		if n := n1 - n0; n > 0 {
			res.ChangeSliceWrites, res.ChangeSliceWriteS, res.ChangeSliceEtcdS = n, (t1-t0)/n, (e1-e0)/n
		}
	}
	res.OperatorExits, res.OperatorExit = op.restarts()
	res.OperatorChangeCPUS = since(opC0.cpu.Seconds(), opC1.cpu.Seconds(), ex0, res.OperatorExits)
	res.OperatorRSSMiB, res.OperatorPeakMiB = opC1.rss, opC1.hwm
	for _, m := range []struct {
		name string
		to   *float64
	}{{"rest_client_request_duration_seconds_count", &res.OperatorChangeRequests},
		{"rest_client_request_duration_seconds_sum", &res.OperatorChangeRequestS},
		{"rest_client_rate_limiter_duration_seconds_sum", &res.OperatorChangeRateWaitS}} {
		*m.to = since(om0.one(m.name), om1.one(m.name), ex0, res.OperatorExits)
	}
	written := tr.writtenTimes()
	res.ChangeWrittenP50S, res.ChangeWrittenMaxS = pct(written, 50), maxOf(written).Seconds()
	res.ChangeAppliedP50S, res.ChangeAppliedMaxS = pct(applied, 50), maxOf(applied).Seconds()
	res.ChangeSlicesP50S, res.ChangeSlicesMaxS = pct(published, 50), maxOf(published).Seconds()
	res.ChangeNodesMissing = o.Nodes - min(len(applied), len(published))
	if err != nil {
		return res, err
	}

	// At rest again, with the address pools in the NodeConfigs.
	time.Sleep(o.Settle)
	a0, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	after := o.RestWindow / 2
	log.Info("rest window after the change", "window", after)
	time.Sleep(after)
	a1, err := scrape(ctx, w.c)
	if err != nil {
		return res, err
	}
	res.WritesPerNodeHourAfterChange = map[string]float64{}
	for k, v := range diff(scaleMap(res.BaselineWrites, 0.5), diff(a0.writes(), a1.writes())) {
		res.WritesPerNodeHourAfterChange[k] = v / float64(o.Nodes) * float64(time.Hour) / float64(after)
	}

	if o.Pods > 0 {
		if err := schedule(ctx, w, o, &res); err != nil {
			res.OperatorExits, res.OperatorExit = op.restarts()
			return res, fmt.Errorf("scheduling: %w", err)
		}
	}
	res.OperatorExits, res.OperatorExit = op.restarts()
	for _, n := range nodes {
		if n.err != nil {
			return res, fmt.Errorf("node %s's dra: %w", n.name, n.err)
		}
	}
	return res, nil
}
