package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/hookargs"
)

// returns fails the test when f does not return: f must not wait for
// the moves, which the test holds.
func returns(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for the moves", what)
	}
}

// TestHooks_ReturnWhileMovesHeld: with the provisioner's moves held,
// RunPodSandbox and StopPodSandbox return, and CreateContainer returns too,
// handing the container its gate hook; the gate's wait (GateWait) returns
// once the attach ended, with the device in the pod.
func TestHooks_ReturnWhileMovesHeld(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	w.hold = make(chan struct{})
	p := newPlugin(t, w).WithGate(Gate{Hook: "/opt/netdra/bin/netdra-hook", Socket: "/run/netdra-gate/nri.sock"})
	p.conn.setConnected(true) // as after Synchronize
	ctx, sb := context.Background(), pod("pod1", "/var/run/netns/p1")
	returns(t, "RunPodSandbox", func() error { return p.RunPodSandbox(ctx, sb) })
	var adj *api.ContainerAdjustment
	returns(t, "CreateContainer", func() (err error) {
		adj, _, err = p.CreateContainer(ctx, sb, &api.Container{Name: "app"})
		return err
	})
	want := []*api.Hook{{Path: "/opt/netdra/bin/netdra-hook", Args: []string{"netdra-hook", "wait-attached", "-socket", "/run/netdra-gate/nri.sock",
		"-pod", "pod1", "-netns", "/var/run/netns/p1"}, Timeout: &api.OptionalInt{Value: gatehook.HookTimeout}}}
	if diff := cmp.Diff(want, adj.GetHooks().GetCreateRuntime(), cmp.Comparer(func(a, b *api.Hook) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("the container's createRuntime hooks (-want +got):\n%s", diff)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- p.GateWait(ctx, gatehook.Request{PodUID: "pod1", Netns: "/var/run/netns/p1"})
	}()
	close(w.hold)
	if err := <-waited; err != nil {
		t.Fatalf("GateWait: %v", err)
	}
	if got := w.where["a"]; got != "/var/run/netns/p1" {
		t.Fatalf("after GateWait device a is in %q", got)
	}
	w.mu.Lock()
	w.hold = make(chan struct{})
	w.mu.Unlock()
	returns(t, "StopPodSandbox", func() error { return p.StopPodSandbox(ctx, sb) })
	close(w.hold)
	p.Wait()
	if got := w.where["a"]; got != "" {
		t.Errorf("after the detach device a is in %q", got)
	}
}

// TestGateWait_Refusals: the gate's answer names what is wrong: a pod
// with no running sandbox there, a device that cannot be attached (and
// the next container's creation attaches again).
func TestGateWait_Refusals(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	w.failAttach["a"] = errors.New("link busy")
	p := newPlugin(t, w).WithGate(Gate{Hook: "/opt/netdra/bin/netdra-hook", Socket: "/run/netdra-gate/nri.sock"})
	p.conn.setConnected(true) // as after Synchronize
	ctx := context.Background()
	for _, req := range []gatehook.Request{{PodUID: "pod1", Netns: "/var/run/netns/p1"}, {PodUID: "pod1"}} {
		if err := p.GateWait(ctx, req); err == nil || !strings.Contains(err.Error(), "netdra: pod pod1 has no running sandbox") {
			t.Errorf("GateWait(%+v) = %v, want no running sandbox", req, err)
		}
	}
	sb := pod("pod1", "/var/run/netns/p1")
	if err := p.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := p.GateWait(ctx, gatehook.Request{PodUID: "pod1", Netns: "/var/run/netns/other"}); err == nil || !strings.Contains(err.Error(), "no running sandbox in netns /var/run/netns/other") {
		t.Errorf("GateWait in another netns = %v", err)
	}
	err := p.GateWait(ctx, gatehook.Request{PodUID: "pod1", Netns: "/var/run/netns/p1"})
	if err == nil || !strings.Contains(err.Error(), "netdra: pod pod1: device a (claim /): link busy") {
		t.Errorf("GateWait of a failed attach = %v, want the device and the cause", err)
	}
	w.takeCalls()
	delete(w.failAttach, "a")
	if _, _, err := p.CreateContainer(ctx, sb, &api.Container{Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := p.GateWait(ctx, gatehook.Request{PodUID: "pod1", Netns: "/var/run/netns/p1"}); err != nil {
		t.Errorf("GateWait after the kubelet's next creation: %v", err)
	}
	if got := w.where["a"]; got != "/var/run/netns/p1" {
		t.Errorf("device a is in %q", got)
	}
}

// TestCreateContainer_DraHookAsksTheGate: a container whose CDI hook (dra's
// check-netns with the gate's socket) asks the gate gets no hook of nri's
// and no wait in CreateContainer, even while its pod's attach runs; the
// gate's answer, asked without the netns as that hook asks, waits for the
// attach, and refuses a failed one with its reason.
func TestCreateContainer_DraHookAsksTheGate(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared), alloc("b", "pod2", prepared))
	w.failAttach["b"] = errors.New("link busy")
	w.hold = make(chan struct{})
	p := newPlugin(t, w).WithGate(Gate{Hook: "/opt/netdra/bin/netdra-hook", Socket: "/run/netdra-gate/nri.sock"})
	p.conn.setConnected(true) // as after Synchronize
	ctx := context.Background()
	draHook := &api.Hooks{CreateRuntime: []*api.Hook{{Path: "/opt/netdra/bin/netdra-hook",
		Args: hookargs.CheckNetnsArgs("/opt/netdra/bin/netdra-hook", "/run/netdra-gate/nri.sock", "net1")}}}
	for _, sb := range []*api.PodSandbox{pod("pod1", "/var/run/netns/p1"), pod("pod2", "/var/run/netns/p2")} {
		returns(t, "RunPodSandbox", func() error { return p.RunPodSandbox(ctx, sb) })
		returns(t, "CreateContainer", func() error {
			adj, _, err := p.CreateContainer(ctx, sb, &api.Container{Name: "app", Hooks: draHook})
			if adj != nil {
				t.Errorf("CreateContainer of a container with dra's gate hook = %v, want nothing", adj)
			}
			return err
		})
	}
	waited := make(chan error, 1)
	go func() { waited <- p.GateWait(ctx, gatehook.Request{PodUID: "pod1"}) }()
	close(w.hold)
	if err := <-waited; err != nil {
		t.Fatalf("GateWait: %v", err)
	}
	if got := w.where["a"]; got != "/var/run/netns/p1" {
		t.Errorf("after GateWait device a is in %q", got)
	}
	if err := p.GateWait(ctx, gatehook.Request{PodUID: "pod2"}); err == nil || !strings.Contains(err.Error(), "link busy") {
		t.Errorf("GateWait of a failed attach = %v, want its reason", err)
	}
}

// TestStop_NewSandboxWaitsForDetach: a pod's new sandbox (the kubelet made
// it again) gets its device only after the old sandbox's detach ended.
func TestStop_NewSandboxWaitsForDetach(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPlugin(t, w)
	ctx := context.Background()
	if err := start(p, pod("pod1", "/var/run/netns/old")); err != nil {
		t.Fatal(err)
	}
	w.takeCalls()
	w.mu.Lock()
	w.hold = make(chan struct{})
	w.mu.Unlock()
	returns(t, "StopPodSandbox", func() error { return p.StopPodSandbox(ctx, pod("pod1", "/var/run/netns/old")) })
	returns(t, "RunPodSandbox", func() error { return p.RunPodSandbox(ctx, pod("pod1", "/var/run/netns/new")) })
	close(w.hold)
	p.Wait()
	want := []string{"provisioner.Detach a /var/run/netns/old", "state.MarkDetached a",
		"provisioner.Attach a /var/run/netns/new net-a", "state.MarkAttached a /var/run/netns/new"}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestCreateContainer_PodWithoutDevicesNeverHooked: a pod without netdra
// devices gets no gate hook, whether its (empty) attach has ended or not,
// nor does a second container of a pod whose devices are in.
func TestCreateContainer_PodWithoutDevicesNeverHooked(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPlugin(t, w).WithGate(Gate{Hook: "/opt/netdra/bin/netdra-hook", Socket: "/run/netdra-gate/nri.sock"})
	ctx := context.Background()
	for range 20 {
		sb := pod("plain", "/var/run/netns/plain")
		if err := p.RunPodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if adj, _, err := p.CreateContainer(ctx, sb, &api.Container{Name: "app"}); err != nil || adj != nil {
			t.Fatalf("CreateContainer of a pod without devices = %v, %v; want nothing", adj, err)
		}
		if err := stop(p, sb); err != nil {
			t.Fatal(err)
		}
	}
	sb := pod("pod1", "/var/run/netns/p1")
	if err := p.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	for _, ctr := range []string{"first", "second"} {
		if adj, _, err := p.CreateContainer(ctx, sb, &api.Container{Name: ctr}); err != nil || adj != nil {
			t.Errorf("CreateContainer %s after the attach = %v, %v; want nothing", ctr, adj, err)
		}
	}
}

// TestStatus_ShowsWork: Status says what a pod's background attach and
// detach are at, for an operator asking why a container waits.
func TestStatus_ShowsWork(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	w.hold = make(chan struct{})
	p := newPlugin(t, w)
	ctx, sb := context.Background(), pod("pod1", "/var/run/netns/p1")
	pods := func() []*nriv1.Pod {
		out, err := p.Service().Status(ctx, &nriv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return out.GetPods()
	}
	returns(t, "RunPodSandbox", func() error { return p.RunPodSandbox(ctx, sb) })
	want := []*nriv1.Pod{{Uid: "pod1", NetnsPath: "/var/run/netns/p1", Attach: "running: attaching device a (claim /)"}}
	for deadline := time.Now().Add(10 * time.Second); !cmp.Equal(want, pods(), protocmp.Transform()) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // until the attach reaches the provisioner
	}
	if diff := cmp.Diff(want, pods(), protocmp.Transform()); diff != "" {
		t.Errorf("while attaching (-want +got):\n%s", diff)
	}
	close(w.hold)
	p.Wait()
	if got := pods(); len(got) != 1 || got[0].GetAttach() != "done" {
		t.Errorf("after the attach: %v", got)
	}
	w.mu.Lock()
	w.hold = make(chan struct{})
	w.mu.Unlock()
	returns(t, "StopPodSandbox", func() error { return p.StopPodSandbox(ctx, sb) })
	if got := pods(); len(got) != 1 || !strings.HasPrefix(got[0].GetDetach(), "running: ") {
		t.Errorf("while detaching: %v", got)
	}
	close(w.hold)
	p.Wait()
	if got := pods(); len(got) != 0 {
		t.Errorf("after the detach: %v", got)
	}
}

// TestWork_BoundsCalls: a burst of 12 pods of 8 devices, started at once,
// never has more than MaxCalls attaches (then detaches) with the
// provisioner at once, and has that many; every device ends in its pod,
// then back in the host, and each pod's containers pass the gate.
func TestWork_BoundsCalls(t *testing.T) {
	const pods, devices = 12, 8
	var allocs []*statev1.Allocation
	for i := range pods {
		for d := range devices {
			allocs = append(allocs, alloc(fmt.Sprintf("d%d-%d", i, d), fmt.Sprintf("pod%d", i), prepared))
		}
	}
	w := newWorld(allocs...)
	// Long enough that every pod's calls are queued before the first
	// ones end, so that the bound, not the test's pace, sets how many
	// run at once: with a short pause, a loaded machine ends calls before
	// the last pods queue theirs and never reaches the bound.
	w.pause = 50 * time.Millisecond
	p := newPlugin(t, w)
	p.conn.setConnected(true) // as after Synchronize
	ctx := context.Background()
	sandbox := func(i int) *api.PodSandbox { return pod(fmt.Sprintf("pod%d", i), fmt.Sprintf("/var/run/netns/p%d", i)) }
	for i := range pods {
		if err := p.RunPodSandbox(ctx, sandbox(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pods {
		if err := p.GateWait(ctx, gatehook.Request{PodUID: fmt.Sprintf("pod%d", i), Netns: fmt.Sprintf("/var/run/netns/p%d", i)}); err != nil {
			t.Fatalf("GateWait(pod%d): %v", i, err)
		}
	}
	check := func(what string, where func(pod int) string) {
		t.Helper()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.peak > MaxCalls || w.peak < MaxCalls {
			t.Errorf("%s: %d moves at once, want %d", what, w.peak, MaxCalls)
		}
		for i := range pods {
			for d := range devices {
				if got, want := w.where[fmt.Sprintf("d%d-%d", i, d)], where(i); got != want {
					t.Errorf("%s: device d%d-%d is in %q, want %q", what, i, d, got, want)
				}
			}
		}
		w.peak = 0
	}
	check("attach", func(i int) string { return fmt.Sprintf("/var/run/netns/p%d", i) })
	for i := range pods {
		if err := p.StopPodSandbox(ctx, sandbox(i)); err != nil {
			t.Fatal(err)
		}
	}
	p.Wait()
	check("detach", func(int) string { return "" })
}
