package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// failedPrepare is the kubelet's event reason for a NodePrepareResources
// that failed (the pod worker then retries the pod later).
const failedPrepare = "FailedPrepareDynamicResources"

// TestE2E_DraRestartRiddenOut: pods whose prepare meets a restarting dra
// start without a failed prepare. dra is killed (-9), pods with claims
// are created while it is away, and it is started again a second later,
// as a container restart does: the kubelet's calls wait in the backlog of
// the plugin socket that dra's socket holder (`dra sockets`) keeps
// listening, and the kubelet's plugin watcher sees no change (no
// inotify event on the registration socket throughout). The kubelet's own
// record is the evidence: no FailedPrepareDynamicResources event on any
// pod. The pods' time to Running is logged beside that of pods started
// without a kill in the same test (the speed is measured, not asserted).
func TestE2E_DraRestartRiddenOut(t *testing.T) {
	devs := []string{"data0", "data1", "data2"}
	nn := startNetdraKeepingSockets(t, devs...)
	c := nn.cp.Client()
	ifNames := make([]any, len(devs))
	for i, d := range devs {
		ifNames[i] = d
	}
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": ifNames}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1"})
	waitFor(t, "the pool's devices to be published", time.Minute, func(ctx context.Context) (bool, error) {
		pools, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && pools["net"] == len(devs), nil
	})
	reg := filepath.Join(nn.node.RegistryDir(), driver+"-reg.sock")
	regChanges := watchFile(t, reg)

	calm := startPodRound(t, c, ns, tmpl, nn.node.Name(), "calm", len(devs), nil)
	nn.deletePods(t, c, ns, calm.pods)

	var back time.Time
	riding := startPodRound(t, c, ns, tmpl, nn.node.Name(), "ride", len(devs), func(created func()) {
		nn.dra.Kill()
		created()
		time.Sleep(time.Second)
		nn.dra.Restart()
		back = time.Now()
	})
	t.Logf("RIDEOUT: pods started without a kill: %s", calm)
	t.Logf("RIDEOUT: pods created while dra was killed, dra back %s after the first: %s", back.Sub(riding.created).Round(time.Millisecond), riding)

	for _, r := range []*podRound{calm, riding} {
		if evs := r.failedPrepares(t, c, ns); len(evs) > 0 {
			t.Errorf("the kubelet failed prepares of the %s pods (its retry is what the held sockets spare them):\n%s", r.name, strings.Join(evs, "\n"))
		}
	}
	if changes := regChanges(); len(changes) > 0 {
		t.Errorf("the registration socket %s changed across dra's restart, as the kubelet's plugin watcher saw it: %v", reg, changes)
	}
	if log := nn.dra.Log(); !strings.Contains(log, "Serving the kubelet on the held sockets it registered") {
		t.Error("the restarted dra did not serve on the sockets the kubelet had registered")
	}
	nn.deletePods(t, c, ns, riding.pods)
}

// watchFile watches path's directory with inotify, as the kubelet's
// plugin watcher does (fsnotify), from now until the returned function is
// called; it returns the events on path: its removal, creation or
// renaming.
func watchFile(t *testing.T, path string) func() []string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []string
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Name == path && ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
					mu.Lock()
					events = append(events, ev.String())
					mu.Unlock()
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				mu.Lock()
				events = append(events, "watch error: "+err.Error())
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	stop := func() []string {
		once.Do(func() { w.Close(); <-done })
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
	t.Cleanup(func() { stop() })
	return stop
}

// podRound is a batch of pods with claims created together.
type podRound struct {
	name    string
	pods    []*corev1.Pod
	created time.Time       // the first pod's creation
	running []time.Duration // each pod's time from its creation to Running
}

func (r *podRound) String() string {
	s := slices.Clone(r.running)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("%d pods to Running in %s (median %s, max %s)", len(s), strings.Join(parts, ", "),
		s[len(s)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
}

// startPodRound creates n pods with a claim from tmpl and waits until each
// runs, timing it from its creation. around, when set, is called with
// the function that creates them, to disrupt their start.
func startPodRound(t *testing.T, c kubernetes.Interface, ns, tmpl, node, name string, n int, around func(created func())) *podRound {
	t.Helper()
	r := &podRound{name: name}
	createdAt := make([]time.Time, n)
	create := func() {
		for i := range n {
			createdAt[i] = time.Now()
			r.pods = append(r.pods, newPod(t, c, ns, fmt.Sprintf("%s-%d", name, i), node, tmpl))
		}
		r.created = createdAt[0]
	}
	if around == nil {
		create()
	} else {
		around(create)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.running = make([]time.Duration, n)
	left := n
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for i, p := range r.pods {
			if r.running[i] != 0 {
				continue
			}
			got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && got.Status.Phase == corev1.PodRunning {
				r.running[i] = time.Since(createdAt[i])
				left--
			}
		}
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("waiting for the %s pods to run: %d of %d not Running: %v", name, left, n, err)
	}
	return r
}

// failedPrepares are the kubelet's FailedPrepareDynamicResources events
// on the round's pods.
func (r *podRound) failedPrepares(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + failedPrepare})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		for _, p := range r.pods {
			if e.InvolvedObject.UID == p.UID {
				out = append(out, fmt.Sprintf("%s: %s (%d times)", p.Name, e.Message, e.Count))
			}
		}
	}
	return out
}

// deletePods deletes the pods and waits until they and their allocations
// are gone.
func (nn *netdraNode) deletePods(t *testing.T, c kubernetes.Interface, ns string, pods []*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the pods to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			if _, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	waitFor(t, "the allocations to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
}
