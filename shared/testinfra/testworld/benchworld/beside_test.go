package benchworld

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// besidePlain is how many pods without a claim each phase of
// BenchmarkWorld_PodBesideDevicePods creates at once, besideExtra how many
// pods are created beside them, besideRounds how many times the phases run
// in turn; $NETDRA_BENCH_BESIDE_PODS, $NETDRA_BENCH_BESIDE_DEVICE_PODS and
// $NETDRA_BENCH_BESIDE_ROUNDS set other numbers. The node has a veth for
// each device of the extra pods: a phase's pods are gone, their devices
// back, before the next.
var (
	besidePlain  = envCount("NETDRA_BENCH_BESIDE_PODS", 20)
	besideExtra  = envCount("NETDRA_BENCH_BESIDE_DEVICE_PODS", 4)
	besideRounds = envCount("NETDRA_BENCH_BESIDE_ROUNDS", 3)
)

// besideDevices is how many netdra devices each extra pod's claim has.
const besideDevices = 8

// envCount is the positive integer in $name, or def.
func envCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkWorld_PodBesideDevicePods measures how much a pod without
// netdra devices is delayed by pods with 8 devices each starting beside it
// on the real node: besidePlain pods without a claim are created at
// once, alone ("alone"), with besideExtra pods without a claim
// created at the same moment ("beside-plain": as many pods, no devices),
// and with besideExtra pods each with a claim of 8 host veths created at
// the same moment ("beside-devices"). Each pod is timed from its create
// request to Ready; the pods of a phase are deleted, their sandboxes
// stopped and every veth back in the host netns, before the next. The
// phases run in turn besideRounds times (their order rotated) and each
// phase's samples are pooled; nri's and dra's metrics give the mean time
// of netdra's hooks over each phase's starts and teardowns.
func BenchmarkWorld_PodBesideDevicePods(b *testing.B) {
	w := startPodWorld(b, besideExtra*besideDevices, "bench-beside-net", deviceTemplate(b, besideDevices))
	// One pod of each kind first, unmeasured: the image's first unpack,
	// the CNI's first run, the first 8-device attach.
	w.phase(b, "warm", false, false, 1)
	w.phase(b, "warm", true, false, 1)
	w.settle(b, nil, 0, besideExtra*besideDevices)
	phases := []besidePhase{{name: "alone"}, {name: "beside-plain", extra: besideExtra},
		{name: "beside-devices", extra: besideExtra, devices: true}}
	runs := make([]besideRun, len(phases))
	for r := range besideRounds {
		for j := range phases {
			i := (j + r) % len(phases)
			runs[i].add(w.besideRound(b, phases[i], r))
		}
	}
	for i, ph := range phases {
		rec := runs[i].record(ph)
		// One line a phase: a benchmark's log is cut after 10 lines.
		b.Logf("%s: %d pods without a claim beside %d (%d devices each), %d rounds: ready p50 %.0f ms p99 %.0f ms (round p50s %.0f); beside pods ready p50 %.0f ms (bound p50 %.0f ms); %d failed; netdra (mean ms): %s; hook calls over 2.5 ms: %s",
			ph.name, rec.Plain, rec.Extra, rec.Devices, rec.Rounds, rec.Ready.P50, rec.Ready.P99, rec.RoundP50, rec.ExtraReady.P50,
			rec.ExtraScheduled.P50, rec.Failures, rounded(rec.Hooks, 1), rounded(rec.HooksOver, 2))
		if err := figures.Record(figures.BesideFile, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// rounded lists m's values with digits decimals, sorted by key.
func rounded(m map[string]float64, digits int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %.*f", k, digits, m[k]))
	}
	return strings.Join(out, ", ")
}

// besidePhase is what starts beside the pods without a claim: extra pods,
// with a claim of besideDevices devices each or without a claim.
type besidePhase struct {
	name    string
	extra   int
	devices bool
}

// besideRun is what the rounds of a phase measured: the pods without a
// claim's times to Ready, the extra pods' to Ready and to their binding,
// and the deltas of netdra's metrics (hookTimes: sum and count by call;
// hooksWithin: calls within 2.5 ms and all calls by nri hook).
type besideRun struct {
	ready, extraReady, extraBound []time.Duration
	roundP50                      []float64
	failures, rounds              int
	wall                          time.Duration
	calls, within                 map[string][2]float64
}

func (a *besideRun) add(r besideRun) {
	a.ready, a.extraReady, a.extraBound = append(a.ready, r.ready...), append(a.extraReady, r.extraReady...), append(a.extraBound, r.extraBound...)
	a.failures, a.rounds, a.wall = a.failures+r.failures, a.rounds+1, a.wall+r.wall
	a.roundP50 = append(a.roundP50, figures.Summarize(r.ready).P50)
	if a.calls == nil {
		a.calls, a.within = map[string][2]float64{}, map[string][2]float64{}
	}
	addDelta(a.calls, nil, r.calls)
	addDelta(a.within, nil, r.within)
}

func (a *besideRun) record(ph besidePhase) figures.Beside {
	rec := figures.Beside{Phase: ph.name, Plain: besidePlain, Extra: ph.extra, Rounds: a.rounds, Failures: a.failures,
		Ready: figures.Summarize(a.ready), RoundP50: a.roundP50, ExtraReady: figures.Summarize(a.extraReady), ExtraScheduled: figures.Summarize(a.extraBound),
		WallSeconds: a.wall.Seconds(), Hooks: meanDelta(nil, a.calls), HooksOver: map[string]float64{}, Context: besideContext(ph)}
	if ph.devices {
		rec.Devices = besideDevices
	}
	for k, x := range a.within {
		if x[1] > 0 {
			rec.HooksOver[k] = 1 - x[0]/x[1]
		}
	}
	return rec
}

// besideContext says what a phase is and what its difference to "alone"
// includes.
func besideContext(ph besidePhase) string {
	switch {
	case ph.extra == 0:
		return fmt.Sprintf("%d pods without a claim created at once, nothing beside them: the baseline", besidePlain)
	case !ph.devices:
		return fmt.Sprintf("the same %d pods with %d pods without a claim created at the same moment: as many pods, no netdra devices; "+
			"the difference to alone is those pods' own cost (sandboxes, CNI, containers) on %d cores", besidePlain, ph.extra, runtime.NumCPU())
	}
	return fmt.Sprintf("the same %d pods with %d pods created at the same moment, each with a claim of %d netdra devices (host veths). "+
		"From the kubelet's side the difference to alone is more than netdra's hooks: it includes the %d pods' own sandboxes and "+
		"containers (beside-plain shows that share), their claims made, allocated and prepared, and the CPU that the %d devices' moves "+
		"into the pods' netns and back take (the provisioner, nri, state, the kernel) on %d cores that the kubelet, containerd and runc "+
		"of the pods without a claim share; the runtime's NRI lock is held by netdra only for its hooks (their mean times)",
		besidePlain, ph.extra, besideDevices, ph.extra, ph.extra*besideDevices, runtime.NumCPU())
}

// besideRound runs one round of a phase: the pods created at once, then
// deleted, and the node idle again.
func (w *startupWorld) besideRound(b *testing.B, ph besidePhase, round int) besideRun {
	b.Helper()
	before, within := w.hookTimes(b), w.hooksWithin(b)
	run := w.besideBurst(b, ph, round)
	w.deleteAll(b)
	w.settle(b, before, besidePlain+ph.extra, besideExtra*besideDevices)
	run.calls, run.within = map[string][2]float64{}, map[string][2]float64{}
	addDelta(run.calls, before, w.hookTimes(b))
	addDelta(run.within, within, w.hooksWithin(b))
	return run
}

// besideBurst creates the round's pods at once, the extra pods among the
// others, and waits for each to be Ready.
func (w *startupWorld) besideBurst(b *testing.B, ph besidePhase, round int) besideRun {
	b.Helper()
	var run besideRun
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	start := func(name string, extra bool) {
		wg.Go(func() {
			<-gate
			st, err := w.startPod(name, extra && ph.devices)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if run.failures == 0 {
					b.Logf("%s: %v", ph.name, err)
				}
				run.failures++
			case extra:
				run.extraReady, run.extraBound = append(run.extraReady, st.ready), append(run.extraBound, st.scheduled)
			default:
				run.ready = append(run.ready, st.ready)
			}
		})
	}
	for i := range max(besidePlain, ph.extra) {
		if i < ph.extra {
			start(fmt.Sprintf("%s-%d-x%d", ph.name, round, i), true)
		}
		if i < besidePlain {
			start(fmt.Sprintf("%s-%d-p%d", ph.name, round, i), false)
		}
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	run.wall = time.Since(t0)
	return run
}

// settle waits until the runtime stopped the phase's pods sandboxes
// (nri's StopPodSandbox count since before) and the node's veths are all
// back in the host netns under their names: the next phase starts on an
// idle node, and the phase's teardown is in its metrics.
func (w *startupWorld) settle(b *testing.B, before map[string][2]float64, pods, veths int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stopped, back := 0.0, 0
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		stopped, back = w.hookTimes(b)["nri StopPodSandbox"][1]-before["nri StopPodSandbox"][1], w.hostVeths(b)
		return stopped >= float64(pods) && back >= veths, nil
	})
	if err != nil {
		b.Fatalf("after the phase: %.0f of %d sandboxes stopped, %d of %d veths back in the host netns: %v", stopped, pods, back, veths, err)
	}
}

// hostVeths counts the node's veths (ps0, ps1, ...) in the host netns
// under their names.
func (w *startupWorld) hostVeths(b *testing.B) int {
	n := 0
	for _, line := range strings.Split(nodetest.IP(b, "-n", w.nn.hostNS, "-o", "link", "show"), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if rest, ok := strings.CutPrefix(name, "ps"); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				n++
			}
		}
	}
	return n
}

// hooksWithin scrapes nri's hook latency histogram: by "nri <hook>", the
// calls that took at most figures.HookSlowSeconds and all calls. It fails
// b when the histogram has calls but no bucket at that bound.
func (w *startupWorld) hooksWithin(b *testing.B) map[string][2]float64 {
	const metric = "netdra_nri_hook_duration_seconds"
	bucket := fmt.Sprintf(`le="%g"`, figures.HookSlowSeconds)
	out := map[string][2]float64{}
	bucketSeen := false
	scrape(b, w.nriMet, func(line string) {
		name, hook, v, ok := sample(line, "hook")
		if !ok {
			return
		}
		x := out["nri "+hook]
		switch {
		case name == metric+"_bucket" && strings.Contains(line, bucket):
			x[0], bucketSeen = v, true
		case name == metric+"_count":
			x[1] = v
		}
		out["nri "+hook] = x
	})
	if len(out) > 0 && !bucketSeen {
		b.Fatalf("%s has no bucket %s: figures.HookSlowSeconds must be one of nri's hook buckets", metric, bucket)
	}
	return out
}

// addDelta adds after - before, key by key, to acc.
func addDelta(acc, before, after map[string][2]float64) {
	for k, a := range after {
		x := acc[k]
		x[0] += a[0] - before[k][0]
		x[1] += a[1] - before[k][1]
		acc[k] = x
	}
}

// deviceTemplate makes the claim template "net<n>": n requests of one
// device each, net1 to net<n>, each with its own pod interface name (the
// devices of a pod need distinct names) and MTU 1400, as the pod startup
// benchmark's one.
func deviceTemplate(b *testing.B, n int) func(c kubernetes.Interface, ns, class string) string {
	return func(c kubernetes.Interface, ns, class string) string {
		b.Helper()
		var spec resourceapi.ResourceClaimSpec
		for i := range n {
			req := fmt.Sprintf("net%d", i+1)
			raw, err := json.Marshal(map[string]any{"podIfName": req, "mtu": 1400})
			if err != nil {
				b.Fatal(err)
			}
			spec.Devices.Requests = append(spec.Devices.Requests, resourceapi.DeviceRequest{Name: req,
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}})
			spec.Devices.Config = append(spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: []string{req},
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver,
					Parameters: k8sruntime.RawExtension{Raw: raw}}}})
		}
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("net%d", n)},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return tmpl.Name
	}
}
