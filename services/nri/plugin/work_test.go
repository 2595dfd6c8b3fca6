package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

// TestHooks_ReturnBeforeTheMoves: RunPodSandbox and StopPodSandbox return
// while the provisioner's moves have not ended (the runtime's NRI lock is
// not held across them); CreateContainer waits for the attach, and is
// refused, saying what the attach is at, when the attach does not end
// within its time. A new sandbox of the pod is attached only after the
// detach of the old one ended.
func TestHooks_ReturnBeforeTheMoves(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPlugin(t, w)
	ctx := context.Background()
	release := w.holdMoves()
	if err := p.RunPodSandbox(ctx, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	refusedWhile(t, p, pod("pod1", "/var/run/netns/p1"), "attaching device a")
	release()
	if err := createContainer(p, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatalf("CreateContainer once the attach ended: %v", err)
	}
	if got := w.at("a"); got != "/var/run/netns/p1" {
		t.Fatalf("device a is in %q", got)
	}

	release = w.holdMoves()
	if err := p.StopPodSandbox(ctx, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	if err := p.RunPodSandbox(ctx, pod("pod1", "/var/run/netns/p2")); err != nil {
		t.Fatal(err)
	}
	refusedWhile(t, p, pod("pod1", "/var/run/netns/p2"), "waiting for the pod's earlier work")
	w.takeCalls()
	release()
	if err := createContainer(p, pod("pod1", "/var/run/netns/p2")); err != nil {
		t.Fatalf("CreateContainer in the new sandbox: %v", err)
	}
	p.Wait()
	want := []string{"provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a",
		"provisioner.Attach a /var/run/netns/p2 net-a", "state.MarkAttached a /var/run/netns/p2"}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("after the new sandbox (-want +got):\n%s", diff)
	}
}

// refusedWhile checks that a container of sb is refused while its attach
// runs, the refusal naming what the attach is at.
func refusedWhile(t *testing.T, p *Plugin, sb *api.PodSandbox, at string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := p.CreateContainer(ctx, sb, &api.Container{Name: "app"})
	if err == nil || !strings.Contains(err.Error(), "has not finished yet") || !strings.Contains(err.Error(), at) {
		t.Fatalf("CreateContainer while the attach runs = %v, want a refusal saying %q", err, at)
	}
}

// TestStop_DetachRetried: a background detach that fails is tried again
// until the device is back.
func TestStop_DetachRetried(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPlugin(t, w)
	if err := p.RunPodSandbox(context.Background(), pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	w.takeCalls()
	w.mu.Lock()
	w.failDetach = 2
	w.mu.Unlock()
	if err := p.StopPodSandbox(context.Background(), pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	want := []string{"provisioner.Detach a /var/run/netns/p1", "provisioner.Detach a /var/run/netns/p1",
		"provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a"}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := w.at("a"); got != "" {
		t.Errorf("device a left in %q", got)
	}
}
