package benchworld

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netdra/netdra/bench/figures"
)

// kubeletRestart restarts the node's kubelet (SIGTERM, then a new one;
// realnode waits for the Node to be Ready, which it still is in the API),
// creates a pod with a claim and one without at once, and records how long
// after the SIGTERM the node's ResourceSlices were back (the kubelet
// deletes them at start) and each pod was Running: the pod without a claim
// is the restarted kubelet's own time, which netdra has no part in.
func (w *startupWorld) kubeletRestart(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old := w.sliceUIDs(ctx, b)
	t0 := time.Now()
	if err := w.nn.node.RestartKubelet(ctx); err != nil {
		b.Fatal(err)
	}
	ready := time.Now()
	running, bound := w.ready.expectRunning("after-restart"), w.ready.expect(scheduledKey("after-restart"))
	plainRunning := w.ready.expectRunning("after-restart-plain")
	for name, claim := range map[string]bool{"after-restart": true, "after-restart-plain": false} {
		if _, err := w.c.CoreV1().Pods(w.ns).Create(ctx, startupPod(name, w.nn.node.Name(), w.tmpl, claim), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	rec := figures.KubeletRestart{RestartSeconds: ready.Sub(t0).Seconds()}
	for {
		uids := w.sliceUIDs(ctx, b)
		if len(uids) > 0 && !overlaps(uids, old) {
			rec.SlicesBackSeconds, rec.SlicesDeleted = time.Since(t0).Seconds(), true
			break
		}
		if time.Since(t0) > 30*time.Second { // the old slices were never deleted
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, x := range []struct {
		ch   <-chan time.Time
		to   *float64
		what string
	}{{bound, &rec.PodBoundSeconds, "bound to the node"}, {running, &rec.PodRunningSeconds, "Running"},
		{plainRunning, &rec.PlainRunningSeconds, "Running (the pod without a claim)"}} {
		select {
		case t := <-x.ch:
			*x.to = t.Sub(t0).Seconds()
		case <-ctx.Done():
			b.Fatalf("the pod created after the kubelet's restart is not %s", x.what)
		}
	}
	b.Logf("kubelet restart: Node Ready after %.2f s; from the SIGTERM, slices back %.3f s (deleted: %v), a new pod with a claim bound %.3f s, Running %.3f s; one without a claim Running %.3f s",
		rec.RestartSeconds, rec.SlicesBackSeconds, rec.SlicesDeleted, rec.PodBoundSeconds, rec.PodRunningSeconds, rec.PlainRunningSeconds)
	if err := figures.Record(figures.RestartFile, rec); err != nil {
		b.Fatal(err)
	}
}

// sliceUIDs returns the UIDs of netdra's ResourceSlices of the node.
func (w *startupWorld) sliceUIDs(ctx context.Context, b *testing.B) map[types.UID]bool {
	b.Helper()
	list, err := w.c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + w.nn.node.Name()})
	if err != nil {
		b.Fatal(err)
	}
	out := map[types.UID]bool{}
	for _, s := range list.Items {
		if s.Spec.Driver == driver {
			out[s.UID] = true
		}
	}
	return out
}

func overlaps(a, b map[types.UID]bool) bool {
	for k := range a {
		if b[k] {
			return true
		}
	}
	return false
}

// expectRunning is expect for the Running phase rather than Ready.
func (rc *readyClock) expectRunning(name string) <-chan time.Time {
	return rc.expect(runningKey(name))
}

func runningKey(name string) string { return "running/" + name }

func scheduledKey(name string) string { return "scheduled/" + name }

// seen fires the waiters of a pod: bound to a node, Running, Ready.
func (rc *readyClock) seen(p *corev1.Pod, t time.Time) {
	if p.Spec.NodeName != "" {
		rc.fire(scheduledKey(p.Name), t)
	}
	if p.Status.Phase == corev1.PodRunning {
		rc.fire(runningKey(p.Name), t)
	}
	if podReady(p) {
		rc.fire(p.Name, t)
	}
}

// hookTimes scrapes nri's and dra's metrics: the sum (seconds) and count
// of each hook's and call's latency histogram, by "nri <hook>" and
// "dra <op>".
func (w *startupWorld) hookTimes(b *testing.B) map[string][2]float64 {
	b.Helper()
	out := map[string][2]float64{}
	for _, m := range []struct{ addr, metric, label, prefix string }{
		{w.nriMet, "netdra_nri_hook_duration_seconds", "hook", "nri "},
		{w.draMet, "netdra_dra_call_duration_seconds", "op", "dra "},
	} {
		scrape(b, m.addr, func(line string) {
			name, label, v, ok := sample(line, m.label)
			if !ok {
				return
			}
			x := out[m.prefix+label]
			switch name {
			case m.metric + "_sum":
				x[0] = v
			case m.metric + "_count":
				x[1] = v
			}
			out[m.prefix+label] = x
		})
	}
	return out
}

// scrape reads the Prometheus metrics served at addr, each line to each.
func scrape(b *testing.B, addr string, each func(line string)) {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
}

// sample parses a Prometheus text line `name{...,label="x",...} value`.
func sample(line, label string) (name, value string, v float64, ok bool) {
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, ' ')
	if strings.HasPrefix(line, "#") || open < 0 || end < open {
		return "", "", 0, false
	}
	key := label + `="`
	i := strings.Index(line[open:], key)
	if i < 0 {
		return "", "", 0, false
	}
	rest := line[open+i+len(key):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", "", 0, false
	}
	f, err := strconv.ParseFloat(line[end+1:], 64)
	return line[:open], rest[:j], f, err == nil
}

// meanDelta is each call's mean time (ms) between two scrapes, for the
// calls made in between.
func meanDelta(before, after map[string][2]float64) map[string]float64 {
	out := map[string]float64{}
	for k, a := range after {
		n := a[1] - before[k][1]
		if n > 0 {
			out[k] = (a[0] - before[k][0]) / n * 1000
		}
	}
	return out
}
