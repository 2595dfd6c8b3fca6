package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerRestartsRidden kills the installed node pod's state container,
// then its dra container (SIGKILL of their processes, as a crash: the
// kubelet restarts the container), each time creating a pod with a claim
// right after the kill, and measures how long each pod takes to be Ready.
// The dra kill is ridden out on the sockets the holder (the netdra-sockets
// DaemonSet's dra-sockets container) holds: the kubelet records no failed prepare for the pod (whose retry
// would delay the pod by the kubelet's back-off), the restarted dra serves the sockets the
// kubelet had registered, and dra-sockets itself did not restart. The
// pods are deleted again, their devices free, when it returns.
func (in *installer) containerRestartsRidden(t *testing.T) (draRide time.Duration) {
	t.Helper()
	c := in.cp.Client()
	holderRestarts := in.containerStatus(t, "dra-sockets").RestartCount
	took := map[string]time.Duration{}
	for i, victim := range []string{"state", "dra"} {
		name := "netdra-ride-" + victim
		manifest := in.demoManifest(t, name, fmt.Sprintf("10.100.0.%d/24", 20+i))
		before := in.containerStatus(t, victim).RestartCount
		in.killContainer(t, victim)
		start := time.Now()
		in.k(t, "apply", "-f", manifest)
		waitFor(t, name+" to be Ready", 2*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods("netdra-demo").Get(ctx, name, metav1.GetOptions{})
			return err == nil && podReady(p), nil
		})
		took[victim] = time.Since(start)
		waitFor(t, victim+"'s container restarted and ready", 2*time.Minute, func(context.Context) (bool, error) {
			s := in.containerStatus(t, victim)
			return s.RestartCount > before && s.Ready, nil
		})
		pod, err := c.CoreV1().Pods("netdra-demo").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := &podRound{name: victim, pods: []*corev1.Pod{pod}}
		evs := r.failedPrepares(t, c, "netdra-demo")
		t.Logf("RIDEOUT (installed): a pod created right after a kill of the %s container Ready in %s; failed prepares: %d",
			victim, took[victim].Round(time.Millisecond), len(evs))
		if victim == "dra" && len(evs) > 0 {
			t.Errorf("the kubelet failed the prepare of a pod created while dra's container restarted (the held sockets should spare it the retry):\n%s",
				strings.Join(evs, "\n"))
		}
		if victim == "dra" {
			s := in.containerStatus(t, "dra")
			node := in.nodePod(t)
			log, err := in.node.ContainerLog(in.ns, node.Name, node.UID, "dra", int(s.RestartCount))
			if err != nil || !strings.Contains(log, "Serving the kubelet on the held sockets it registered") {
				t.Errorf("the restarted dra container (restart %d) did not serve on the sockets the kubelet had registered (%v):\n%s", s.RestartCount, err, log)
			}
		}
		in.k(t, "-n", "netdra-demo", "delete", "pod", name, "--wait=true", "--timeout=2m")
		waitFor(t, name+" to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods("netdra-demo").Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	if n := in.containerStatus(t, "dra-sockets").RestartCount; n != holderRestarts {
		t.Errorf("dra-sockets restarted %d times during dra's and state's restarts, want 0", n-holderRestarts)
	}
	t.Logf("RIDEOUT (installed): dra container restart %s, state container restart %s",
		took["dra"].Round(time.Millisecond), took["state"].Round(time.Millisecond))
	return took["dra"]
}

// podReady says the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// containerStatus is the status of the node pod's container name, or of
// the holder's pod's for dra-sockets.
func (in *installer) containerStatus(t *testing.T, name string) corev1.ContainerStatus {
	t.Helper()
	app := "netdra-node"
	if name == "dra-sockets" {
		app = "netdra-sockets"
	}
	pods, err := in.cp.Client().CoreV1().Pods(in.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + app, FieldSelector: "spec.nodeName=" + in.node.Name()})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the node's %s pod: %v (%d pods)", app, err, len(pods.Items))
	}
	for _, s := range pods.Items[0].Status.ContainerStatuses {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s pod %s has no container %s", app, pods.Items[0].Name, name)
	return corev1.ContainerStatus{}
}

// killContainer sends SIGKILL to every process of the node pod's container
// name, found by its container ID in their cgroup paths: the container
// crashes, and the kubelet restarts it.
func (in *installer) killContainer(t *testing.T, name string) {
	t.Helper()
	s := in.containerStatus(t, name)
	_, id, ok := strings.Cut(s.ContainerID, "://")
	if !ok || len(id) < 12 {
		t.Fatalf("container %s: ID %q", name, s.ContainerID)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var killed []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, pid)
		}
	}
	if len(killed) == 0 {
		t.Fatalf("no process of container %s (%s) found to kill", name, id)
	}
}
