package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRun_ProvisionerRestartsDuringAttach: the provisioner dies during
// Attach and comes back; grpc repeats the attach (it is idempotent) and the
// sandbox starts with its device.
func TestRun_ProvisionerRestartsDuringAttach(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	w.unavailable = 2
	if err := start(newPluginOverGRPC(t, w), pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"provisioner.Attach a /var/run/netns/p1 net-a", "provisioner.Attach a /var/run/netns/p1 net-a",
		"provisioner.Attach a /var/run/netns/p1 net-a", "state.MarkAttached a /var/run/netns/p1",
	}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestStop_ProvisionerRestartsDuringDetach: the provisioner dies during
// Detach and comes back; grpc repeats the detach before the runtime
// removes the netns, so the device is not lost with it.
func TestStop_ProvisionerRestartsDuringDetach(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPluginOverGRPC(t, w)
	if err := start(p, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	w.takeCalls()
	w.unavailable = 1
	if err := stop(p, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"provisioner.Detach a /var/run/netns/p1", "provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a"}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if w.where["a"] != "" {
		t.Errorf("device a left in %s", w.where["a"])
	}
}

// TestRun_UnknownOutcomeDetached: an Attach whose reply is lost may have
// moved the device: the failed attach detaches it too, not only the
// devices attached before it.
func TestRun_UnknownOutcomeDetached(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	w.failAttach["a"] = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	w.where["a"] = "/var/run/netns/p1" // it got there before the reply was lost
	p := newPlugin(t, w)
	if err := start(p, pod("pod1", "/var/run/netns/p1")); err == nil {
		t.Fatal("the container was let start")
	}
	if err := p.StopPodSandbox(context.Background(), pod("pod1", "/var/run/netns/p1")); err != nil { // the sandbox fails
		t.Fatal(err)
	}
	p.Wait()
	want := []string{"provisioner.Attach a /var/run/netns/p1 net-a", "provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a"}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if w.where["a"] != "" {
		t.Errorf("device a left in %s", w.where["a"])
	}
	// The failed sandbox is not live: a reconciliation attaches nothing to it.
	p.Reconcile(context.Background())
	if calls := w.takeCalls(); len(calls) != 0 {
		t.Errorf("reconciling after a failed sandbox: %q", calls)
	}
}

// TestSynchronize_AttachesPodThatRanWithout: a sandbox started while the
// plugin was not connected runs without its prepared device; once the
// plugin is back, Synchronize lists the sandbox and the device is attached.
// A sandbox stopped meanwhile ends without its device: the background
// attach either skips it or gets there first, and then the stop detaches it.
func TestSynchronize_AttachesPodThatRanWithout(t *testing.T) {
	w := newWorld(alloc("a", "ran", prepared), alloc("b", "stopped", prepared))
	p := newPlugin(t, w)
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod("ran", "/var/run/netns/ran"), pod("stopped", "/var/run/netns/stopped")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := stop(p, pod("stopped", "/var/run/netns/stopped")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = append(got, w.takeCalls()...)
	}
	p.Reconcile(context.Background()) // waits for the background one
	got = append(got, w.takeCalls()...)
	var ofA, ofB []string
	for _, c := range got {
		if strings.Contains(c, " a ") {
			ofA = append(ofA, c)
		} else {
			ofB = append(ofB, c)
		}
	}
	want := []string{"provisioner.Attach a /var/run/netns/ran net-a", "state.MarkAttached a /var/run/netns/ran"}
	if diff := cmp.Diff(want, ofA); diff != "" {
		t.Errorf("device a (-want +got):\n%s", diff)
	}
	attachedThenStopped := []string{
		"provisioner.Attach b /var/run/netns/stopped net-b", "state.MarkAttached b /var/run/netns/stopped",
		"provisioner.Detach b /var/run/netns/stopped", "state.MarkDetached b",
	}
	if len(ofB) != 0 && !cmp.Equal(attachedThenStopped, ofB) {
		t.Errorf("device b of the stopped sandbox: %q, want nothing or %q", ofB, attachedThenStopped)
	}
	if w.where["b"] != "" {
		t.Errorf("device b of the stopped sandbox is in %s", w.where["b"])
	}
}
