//go:build !kernelrig

package server

// The provisioner's handles on pod namespaces (handles.go), with real
// namespaces and a real veth: the runtime tearing a pod down without a
// Detach (its netns path removed, as `ip netns del` does) does not lose
// the device while the provisioner holds the handle; without the handle
// (a provisioner restart) the veth dies with the namespace and Detach says
// so.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// attached sets eth1 up and attaches it into the world's pod netns as net1.
func (w *ebpfWorld) attached(t *testing.T) (*devicev1.PreparedDevice, *devicev1.DeviceConfig) {
	t.Helper()
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
	setup, err := w.srv.Setup(ctxFor(t), setupOf(w.device(t), cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	if _, err := w.srv.Attach(ctxFor(t), &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.podPath(), Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if n := w.srv.handles.count(); n != 1 {
		t.Fatalf("%d netns handles after Attach, want 1", n)
	}
	return pd, cfg
}

func (w *ebpfWorld) podPath() string { return "/var/run/netns/" + w.pod }

// tearDownPod removes the pod's netns as a runtime does: the path goes,
// and nothing but a held handle keeps the namespace.
func (w *ebpfWorld) tearDownPod(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", w.pod).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", w.pod, err, out)
	}
}

// wantHostEth1 checks eth1 is back in the host as it was.
func (w *ebpfWorld) wantHostEth1(t *testing.T) {
	t.Helper()
	l, err := netnstest.Handle(t, w.hostPath).LinkByName("eth1")
	if err != nil {
		t.Fatalf("eth1 is not back in the host: %v", err)
	}
	if got := l.Attrs().HardwareAddr.String(); got != w.hostMAC.String() {
		t.Errorf("eth1's MAC is %s, want %s", got, w.hostMAC)
	}
	if n := w.srv.handles.count(); n != 0 {
		t.Errorf("%d netns handles left, want 0", n)
	}
}

func TestHandles_DetachAfterRuntimeRemovedNetns(t *testing.T) {
	w := newEBPFWorld(t)
	pd, cfg := w.attached(t)
	w.tearDownPod(t)

	resp, err := w.srv.Detach(ctxFor(t), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.podPath(), Config: cfg})
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if resp.GetDeviceLost() {
		t.Error("Detach says the device is lost; the handle kept its netns")
	}
	w.wantHostEth1(t)
}

// TestHandles_FreeTakesBack: no Detach at all (nri never heard of the
// pod's end); the claim's unprepare takes the device back.
func TestHandles_FreeTakesBack(t *testing.T) {
	w := newEBPFWorld(t)
	pd, cfg := w.attached(t)
	w.tearDownPod(t)

	if _, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatalf("Free: %v", err)
	}
	w.wantHostEth1(t)
}

// TestHandles_AttachElsewhereTakesBack: the pod's sandbox was torn down
// without a Detach and a new one made; the Attach into the new one takes
// the device back from the old (kept alive by the handle) first.
func TestHandles_AttachElsewhereTakesBack(t *testing.T) {
	w := newEBPFWorld(t)
	pd, cfg := w.attached(t)
	w.tearDownPod(t)
	next := "/var/run/netns/" + nodetest.Netns(t, "ndpod2")

	// The claim stays prepared: the new sandbox's RunPodSandbox attaches
	// the same prepared device.
	if _, err := w.srv.Attach(ctxFor(t), &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: next, Config: cfg}); err != nil {
		t.Fatalf("Attach into the new sandbox: %v", err)
	}
	if _, err := netnstest.Handle(t, next).LinkByName("net1"); err != nil {
		t.Errorf("net1 is not in the new sandbox: %v", err)
	}
	if same, held := w.srv.handles.holds(pd.GetDevice().GetName(), next); !same || !held {
		t.Errorf("handle on the new sandbox: same %v, held %v", same, held)
	}
}

// TestHandles_LateDetachOfAnOldPod: the device was taken back from a pod
// whose Detach had not come (its sandbox torn down, or still there) and
// attached to another pod; that first pod's Detach, arriving late (nri
// retried it while the provisioner restarted), leaves the device in the
// pod that holds it now.
func TestHandles_LateDetachOfAnOldPod(t *testing.T) {
	for _, torn := range []bool{true, false} {
		t.Run(map[bool]string{true: "its netns torn down", false: "its netns still there"}[torn], func(t *testing.T) {
			w := newEBPFWorld(t)
			pd, cfg := w.attached(t)
			if torn {
				w.tearDownPod(t)
			}
			next := "/var/run/netns/" + nodetest.Netns(t, "ndpod2")
			if _, err := w.srv.Attach(ctxFor(t), &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: next, Config: cfg}); err != nil {
				t.Fatalf("Attach into the other pod: %v", err)
			}

			resp, err := w.srv.Detach(ctxFor(t), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.podPath(), Config: cfg})
			if err != nil || resp.GetDeviceLost() {
				t.Fatalf("the old pod's Detach: %v, lost %v; want done", err, resp.GetDeviceLost())
			}
			if _, err := netnstest.Handle(t, next).LinkByName("net1"); err != nil {
				t.Errorf("net1 is not in the pod that holds it now: %v", err)
			}
			if same, held := w.srv.handles.holds(pd.GetDevice().GetName(), next); !same || !held {
				t.Errorf("handle on the pod that holds it now: same %v, held %v", same, held)
			}

			if _, err := w.srv.Detach(ctxFor(t), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: next, Config: cfg}); err != nil {
				t.Fatalf("the holding pod's Detach: %v", err)
			}
			w.wantHostEth1(t)
		})
	}
}

// TestHandles_LostWithoutHandle is today's fallback: a restart lost the
// handles, the netns goes, the veth with it; Detach is done and says the
// device is lost.
func TestHandles_LostWithoutHandle(t *testing.T) {
	w := newEBPFWorld(t)
	pd, cfg := w.attached(t)
	w.srv.handles.closeAll() // as a provisioner restart would
	w.tearDownPod(t)

	resp, err := w.srv.Detach(ctxFor(t), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.podPath(), Config: cfg})
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if !resp.GetDeviceLost() {
		t.Error("Detach does not say the device is lost")
	}
	if _, err := netnstest.Handle(t, w.hostPath).LinkByName("eth1"); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("eth1 in the host: %v; the veth should have died with its netns", err)
	}
}

// cancelAfterAttach is the real mover whose caller goes away (cancels its
// context) once the link is in the pod.
type cancelAfterAttach struct {
	Mover
	cancel context.CancelFunc
}

func (m cancelAfterAttach) Attach(ctx context.Context, hostIfName string, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	err := m.Mover.Attach(ctx, hostIfName, orig, netnsPath, cfg)
	m.cancel()
	return err
}

// TestAttach_CallerGoneIsUndone: the caller of an Attach went away (nri's
// hook timed out) while the link moved: the provisioner finishes, then
// takes the device back itself, since the caller counts the Attach as
// failed and the runtime will tear the netns down.
func TestAttach_CallerGoneIsUndone(t *testing.T) {
	w := newEBPFWorld(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
	setup, err := w.srv.Setup(ctxFor(t), setupOf(w.device(t), cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxFor(t))
	w.srv.mover = cancelAfterAttach{Mover: w.srv.mover, cancel: cancel}
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: w.podPath(), Config: cfg})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("Attach whose caller went away: %v, want Canceled", err)
	}
	w.wantHostEth1(t)
}

// TestHandles_FreeReportsLostWithoutHandle: a restart lost the handles and
// the runtime tore the pod down with no Detach at all; the claim's
// unprepare (Free) finds the veth gone with its netns and says so.
func TestHandles_FreeReportsLostWithoutHandle(t *testing.T) {
	w := newEBPFWorld(t)
	pd, cfg := w.attached(t)
	w.srv.handles.closeAll() // as a provisioner restart would
	w.tearDownPod(t)
	var logs bytes.Buffer
	w.srv.log = slog.New(slog.NewJSONHandler(&logs, nil))

	resp, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg})
	if err != nil {
		t.Fatalf("Free: %v", err)
	}
	if !resp.GetDeviceLost() {
		t.Error("Free does not say the device is lost")
	}
	if !strings.Contains(logs.String(), `"msg":"Device lost`) || !strings.Contains(logs.String(), `"device":"`+pd.GetDevice().GetName()+`"`) {
		t.Errorf("Free did not report the lost device; it logged:\n%s", logs.String())
	}
}
