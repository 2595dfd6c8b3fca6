package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// pod is a sandbox as the runtime describes it: in netns, or in the
// host's network namespace when netns is empty (its other namespaces are
// listed all the same).
func pod(uid, netns string) *api.PodSandbox {
	p := &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: "pod-" + uid, Namespace: "default", Linux: &api.LinuxPodSandbox{
		Namespaces: []*api.LinuxNamespace{{Type: "ipc"}, {Type: "mount"}}}}
	if netns != "" {
		p.Linux.Namespaces = append(p.Linux.Namespaces, &api.LinuxNamespace{Type: "network", Path: netns})
	}
	return p
}

func newPlugin(t *testing.T, w *world) *Plugin {
	p := New(slog.New(slog.NewTextHandler(testWriter{t}, nil)), fakeState{w: w}, fakeProvisioner{w: w}, prometheus.NewRegistry())
	t.Cleanup(p.Wait)
	return p
}

// start is the runtime starting a pod with one container: RunPodSandbox
// starts the attach, CreateContainer (no gate hook) waits for it and says
// whether the container may start.
func start(p *Plugin, sb *api.PodSandbox) error {
	if err := p.RunPodSandbox(context.Background(), sb); err != nil {
		return err
	}
	_, _, err := p.CreateContainer(context.Background(), sb, &api.Container{Name: "app"})
	return err
}

// stop is the runtime stopping a pod: StopPodSandbox starts the detach,
// which has ended when stop returns.
func stop(p *Plugin, sb *api.PodSandbox) error {
	err := p.StopPodSandbox(context.Background(), sb)
	p.Wait()
	return err
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

const prepared, attached = statev1.Phase_PHASE_PREPARED, statev1.Phase_PHASE_ATTACHED

func TestRunStop(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared), alloc("b", "pod1", prepared), alloc("c", "pod2", prepared))
	p := newPlugin(t, w)
	if err := start(p, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"provisioner.Attach a /var/run/netns/p1 net-a", "state.MarkAttached a /var/run/netns/p1",
		"provisioner.Attach b /var/run/netns/p1 net-b", "state.MarkAttached b /var/run/netns/p1",
	}
	if diff := cmp.Diff(perDevice(want), perDevice(w.takeCalls())); diff != "" {
		t.Errorf("run (-want +got):\n%s", diff)
	}
	// The stop event carries no netns: the cached one is used.
	if err := stop(p, pod("pod1", "")); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a",
		"provisioner.Detach b /var/run/netns/p1", "state.MarkDetached b",
	}
	if diff := cmp.Diff(perDevice(want), perDevice(w.takeCalls())); diff != "" {
		t.Errorf("stop (-want +got):\n%s", diff)
	}
}

func TestRun_HostNetworkSkipped(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared))
	if err := newPlugin(t, w).RunPodSandbox(context.Background(), pod("pod1", "")); err != nil {
		t.Fatal(err)
	}
	if calls := w.takeCalls(); len(calls) != 0 {
		t.Errorf("a host-network pod got %q", calls)
	}
}

// TestRun_FailsClosed: the second device fails; the first, attached at
// the same time, is detached again and the container is refused with the
// device and the cause.
func TestRun_FailsClosed(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared), alloc("b", "pod1", prepared))
	w.failAttach["b"] = errors.New("name net-b already in use")
	err := start(newPlugin(t, w), pod("pod1", "/var/run/netns/p1"))
	if err == nil || !strings.Contains(err.Error(), "device b") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("CreateContainer = %v, want the device and the cause", err)
	}
	want := []string{
		"provisioner.Attach a /var/run/netns/p1 net-a", "state.MarkAttached a /var/run/netns/p1",
		"provisioner.Attach b /var/run/netns/p1 net-b", `state.MarkAttachFailed b "name net-b already in use"`,
		"provisioner.Detach a /var/run/netns/p1", "state.MarkDetached a",
	}
	if diff := cmp.Diff(perDevice(want), perDevice(w.takeCalls())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if a := w.allocs["b"]; a.GetAttachError() != "name net-b already in use" || a.GetAttachFailures() != 1 {
		t.Errorf("b's row: attach error %q, failures %d; want the provisioner's refusal, once", a.GetAttachError(), a.GetAttachFailures())
	}
	if w.where["a"] != "" {
		t.Errorf("device a left in %s", w.where["a"])
	}
}

// TestRun_MissingLinkSetUpAgain: after a node reboot the link is gone; the
// device is set up again, attached, and the new prepared device recorded.
func TestRun_MissingLinkSetUpAgain(t *testing.T) {
	w := newWorld(alloc("dummy0", "pod1", prepared))
	w.missing["dummy0"] = true
	if err := start(newPlugin(t, w), pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"provisioner.Attach dummy0 /var/run/netns/p1 net-dummy0", "provisioner.Setup dummy0",
		"provisioner.Attach dummy0 /var/run/netns/p1 net-dummy0", "state.MarkAttached dummy0 /var/run/netns/p1",
	}
	if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if mtu := w.allocs["dummy0"].GetPreparedDevice().GetOriginalLink().GetMtu(); mtu != 9000 {
		t.Errorf("the new prepared device was not recorded (mtu %d)", mtu)
	}
}

// Test_Regression_18_SetupAgainCarriesPool: the Setup after a reboot names
// the pool the device was allocated from, as dra's Setup does, so per-pool
// behaviour (the host manager's keepEbpfProgramsPools) holds for it too;
// it names the device by the prepared device's name and manager.
func Test_Regression_18_SetupAgainCarriesPool(t *testing.T) {
	w := newWorld(alloc("eth1", "pod1", prepared))
	w.allocs["eth1"].Pool = "uplinks"
	w.allocs["eth1"].PreparedDevice.Device.Manager = devicev1.DeviceManager_DEVICE_MANAGER_HOST
	w.missing["eth1"] = true
	if err := start(newPlugin(t, w), pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for dev, r := range w.setups {
		got[dev] = r.GetPool() + " " + r.GetManager().String()
	}
	if diff := cmp.Diff(map[string]string{"eth1": "uplinks DEVICE_MANAGER_HOST"}, got); diff != "" {
		t.Errorf("pools and managers of the Setups (-want +got):\n%s", diff)
	}
}

// TestReconcile: after a restart, Synchronize lists the live pods; a device
// attached to a pod that is gone is detached.
func TestReconcile(t *testing.T) {
	w := newWorld(alloc("a", "live", attached), alloc("b", "gone", attached))
	w.allocs["a"].NetnsPath, w.allocs["b"].NetnsPath = "/var/run/netns/live", "/var/run/netns/gone"
	p := newPlugin(t, w)
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod("live", "/var/run/netns/live")}, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2; time.Sleep(5 * time.Millisecond) {
		got = append(got, w.takeCalls()...)
		if time.Now().After(deadline) {
			break
		}
	}
	want := []string{"provisioner.Detach b /var/run/netns/gone", "state.MarkDetached b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRun_DevicesAttachedAtOnce: the attaches of a pod's devices are in
// flight together (the kernel serializes their moves, not the rest), and
// so are their detaches: each move of the fake provisioner waits until the
// three are in flight, which one after the other never are.
func TestRun_DevicesAttachedAtOnce(t *testing.T) {
	w := newWorld(alloc("a", "pod1", prepared), alloc("b", "pod1", prepared), alloc("c", "pod1", prepared))
	p := newPlugin(t, w)
	for _, hook := range []func(*Plugin, *api.PodSandbox) error{start, stop} {
		w.mu.Lock()
		w.together = &sync.WaitGroup{}
		w.together.Add(3)
		w.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- hook(p, pod("pod1", "/var/run/netns/p1")) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the three moves were not in flight together")
		}
	}
	w.mu.Lock()
	w.together = nil
	w.mu.Unlock()
	for _, d := range []string{"a", "b", "c"} {
		if got := w.where[d]; got != "" {
			t.Errorf("device %s left in %q", d, got)
		}
	}
}

// TestRun_RecordsRefusal: the provisioner's refusal of an attach is
// recorded on the device's row: a refused field as the claim names it
// ("<field>: <reason>"), another error as its message without gRPC's
// prefix. The container is refused all the same and nothing stays in the
// pod.
func TestRun_RecordsRefusal(t *testing.T) {
	const vrf = "this node's kernel has no VRF devices (CONFIG_NET_VRF): operation not supported"
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"field", fmt.Errorf("attaching a: %w", fielderr.New("vrf", "%s", vrf)), "vrf: " + vrf},
		{"config field", fielderr.New("config.dhcp", "only a link that moves takes DHCP"), "dhcp: only a link that moves takes DHCP"},
		{"other", status.Error(codes.AlreadyExists, "name net-a is taken in the pod"), "name net-a is taken in the pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(alloc("a", "pod1", prepared))
			w.failAttach["a"] = tc.err
			if err := start(newPlugin(t, w), pod("pod1", "/var/run/netns/p1")); err == nil {
				t.Fatal("the container was let start")
			}
			want := []string{"provisioner.Attach a /var/run/netns/p1 net-a", fmt.Sprintf("state.MarkAttachFailed a %q", tc.want)}
			if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if w.where["a"] != "" {
				t.Errorf("device a left in %s", w.where["a"])
			}
		})
	}
}
