package benchworld

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// footprintDevices is how many devices the footprint's node offers;
// footprintChurn how many pods with a claim each churn round starts at
// once, footprintRounds how many rounds; footprintPrepares is how many
// prepares back to back time the prepare of one device.
const (
	footprintDevices  = 64
	footprintChurn    = 16
	footprintRounds   = 3
	footprintPrepares = 20
)

// BenchmarkWorld_Footprint measures netdra's four processes on the real
// node with footprintDevices devices (host veths) published, as the DaemonSet runs them
// (the netns hook on, metrics served): their memory idle (VmRSS, and of
// it the heap's and the stacks' pages, RssAnon, against the binary's,
// RssFile), the prepare of one device through dra's plugin socket (the
// kubelet's NodePrepareResources until it returns, back to back, as
// BenchmarkWorld_Prepare), then their peak VmRSS (sampled every 50 ms)
// under churn: rounds of pods with a claim started at once through the
// real kubelet, containerd and nri, and deleted. $NETDRA_TEST_BINARIES
// runs it on another commit's binaries, to compare.
func BenchmarkWorld_Footprint(b *testing.B) {
	w := startPodWorld(b, footprintDevices, "bench-footprint-net", func(c kubernetes.Interface, ns, class string) string {
		return worldtest.ClaimTemplate(b, c, ns, class, map[string]any{"podIfName": "net1", "mtu": 1400})
	})
	procs := w.nn.procs(b)
	for b.Loop() {
		// The publication's writes and their garbage behind, and the
		// start-up pages given back: an idle node's processes have run
		// a while.
		time.Sleep(process.StartupSettle + 5*time.Second)
		w.nn.footprint(b, procs, "idle, 64 devices", "the footprint world: 64 host devices published, nothing prepared", nil)
		b.Logf("idle, the Go runtime's memory, MiB: dra %s; nri %s", goMemory(b, w.draMet), goMemory(b, w.nriMet))

		prep := w.prepareBackToBack(b, footprintPrepares)
		b.ReportMetric(prep.P50, "prepare-p50-ms")
		b.ReportMetric(prep.P99, "prepare-p99-ms")
		b.Logf("prepare of 1 device, %d back to back: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms; dra's steps, p50 ms: %s", footprintPrepares, prep.P50, prep.P90, prep.P99, prepareSteps(w.nn.dra.Log()))

		sampler := figures.NewSampler(procs, 50*time.Millisecond)
		for r := range footprintRounds {
			w.phase(b, fmt.Sprintf("churn%d-", r), true, true, footprintChurn)
		}
		peak := sampler.Stop()
		w.nn.footprint(b, procs, "churn, 64 devices", fmt.Sprintf("the footprint world: peak VmRSS sampled every 50 ms over %d rounds of %d pods with a claim started at once and deleted", footprintRounds, footprintChurn), peak)
		time.Sleep(5 * time.Second)
		w.nn.footprint(b, procs, "after churn, 64 devices", "the footprint world: 5 s after the churn", nil)
		b.Logf("after churn, the Go runtime's memory, MiB: dra %s; nri %s", goMemory(b, w.draMet), goMemory(b, w.nriMet))
	}
}

// procs is the four processes' pids by name.
func (nn *netdraNode) procs(b *testing.B) map[string]int {
	b.Helper()
	out := map[string]int{}
	for _, p := range []*nodetest.Proc{nn.state, nn.prov, nn.dra, nn.nriP} {
		pid, err := figures.FindPID("-socket", p.Socket)
		if err != nil {
			b.Fatal(err)
		}
		out[p.Name] = pid
	}
	return out
}

// footprint records each process's VmRSS (peak's when given), VmHWM,
// RssAnon and RssFile, and reports and logs their sum.
func (nn *netdraNode) footprint(b *testing.B, procs map[string]int, phase, context string, peak map[string]int) {
	b.Helper()
	total := 0
	var parts []string
	for _, name := range []string{"state", "provisioner", "dra", "nri"} {
		st, err := procStatus(procs[name])
		if err != nil {
			b.Fatal(err)
		}
		rss := st["VmRSS"]
		if peak != nil {
			rss = peak[name]
		}
		total += rss
		parts = append(parts, fmt.Sprintf("%s %.1f (anon %.1f, file %.1f)", name, mib(rss), mib(st["RssAnon"]), mib(st["RssFile"])))
		if err := figures.Record(figures.RSSFile, figures.RSS{Process: name, Phase: phase, RSSKiB: rss, HWMKiB: st["VmHWM"],
			AnonKiB: st["RssAnon"], FileKiB: st["RssFile"], Context: context}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(mib(total), strings.ReplaceAll(strings.Split(phase, ",")[0], " ", "-")+"-total-MiB")
	b.Logf("%s: VmRSS MiB, the four together %.1f: %s", phase, mib(total), strings.Join(parts, "; "))
}

// goMemory is what the Go runtime of the process serving metrics at addr
// says it holds (MiB): the heap in use, its idle spans not returned to
// the OS, the goroutine stacks and the runtime's own structures.
func goMemory(b *testing.B, addr string) string {
	b.Helper()
	want := []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
		"go_memstats_stack_inuse_bytes", "go_memstats_mspan_inuse_bytes", "go_memstats_other_sys_bytes", "go_memstats_gc_sys_bytes"}
	got := map[string]float64{}
	scrape(b, addr, func(line string) {
		f := strings.Fields(line)
		if len(f) == 2 && slices.Contains(want, f[0]) {
			got[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	})
	var out []string
	for _, k := range want {
		out = append(out, fmt.Sprintf("%s %.1f", strings.TrimSuffix(strings.TrimPrefix(k, "go_memstats_"), "_bytes"), got[k]/(1<<20)))
	}
	return strings.Join(out, ", ")
}

func mib(kib int) float64 { return float64(kib) / 1024 }

// procStatus is the KiB fields of /proc/<pid>/status (VmRSS, RssAnon, ...).
func procStatus(pid int) (map[string]int, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for line := range strings.Lines(string(raw)) {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if n, err := strconv.Atoi(f[0]); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// prepareBackToBack prepares n claims of one device, one after the
// other, through dra's plugin socket (as BenchmarkWorld_Prepare), each
// unprepared before the next, and returns the prepares' times.
func (w *startupWorld) prepareBackToBack(b *testing.B, n int) figures.Summary {
	b.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(w.nn.dir, "plugins", driver, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	kubelet := drav1.NewDRAPluginClient(conn)
	devices := waitDevices(b, w.c, w.nn.node.Name(), "net", footprintDevices)
	var took []time.Duration
	for i := range n {
		claim := newAllocatedClaim(b, w.c, w.ns, w.nn.node.Name(), fmt.Sprintf("fp-%d", i), devices[:1])
		ref := &drav1.Claim{Namespace: w.ns, Name: claim.Name, Uid: string(claim.UID)}
		t0 := time.Now()
		resp, err := kubelet.NodePrepareResources(context.Background(), &drav1.NodePrepareResourcesRequest{Claims: []*drav1.Claim{ref}})
		took = append(took, time.Since(t0))
		if err != nil {
			b.Fatalf("NodePrepareResources: %v", err)
		}
		if r := resp.GetClaims()[string(claim.UID)]; r.GetError() != "" || len(r.GetDevices()) != 1 {
			b.Fatalf("prepare of %s: %q, %d devices, want 1", claim.Name, r.GetError(), len(r.GetDevices()))
		}
		checkStatus(b, w.c, w.ns, claim.Name, 1)
		uresp, err := kubelet.NodeUnprepareResources(context.Background(), &drav1.NodeUnprepareResourcesRequest{Claims: []*drav1.Claim{ref}})
		if err != nil || uresp.GetClaims()[string(claim.UID)].GetError() != "" {
			b.Fatalf("NodeUnprepareResources: %v %v", err, uresp)
		}
		deleteClaim(w.c, w.ns, claim.Name)
	}
	return figures.Summarize(took)
}

// prepareSteps is the p50 of each step of the prepares in dra's log (its
// "claim prepared" lines' steps: "pod=1.2ms rows=0.3ms ..."), in the
// order the steps come.
func prepareSteps(log string) string {
	var order []string
	byStep := map[string][]float64{}
	for line := range strings.Lines(log) {
		var l struct {
			Msg   string `json:"msg"`
			Steps string `json:"steps"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "claim prepared" {
			continue
		}
		for _, f := range strings.Fields(l.Steps) {
			k, v, ok := strings.Cut(f, "=")
			ms, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64)
			if !ok || err != nil {
				continue
			}
			if byStep[k] == nil {
				order = append(order, k)
			}
			byStep[k] = append(byStep[k], ms)
		}
	}
	var out []string
	for _, k := range order {
		v := slices.Sorted(slices.Values(byStep[k]))
		out = append(out, fmt.Sprintf("%s %.1f", k, v[len(v)/2]))
	}
	return strings.Join(out, ", ")
}
