//go:build kernelrig

package server

// Link settings only a real driver has, applied through the service's API
// on the igb machine's emulated 82576 (kernelrig.machine): the PF's
// netdev as a host device, its igb private flag legacy-rx.

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mdlayher/ethtool"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// privateFlags reads the private flags of the link ifName in the netns
// at path ("" for the test's own) through ethtool netlink.
func privateFlags(t *testing.T, path, ifName string) map[string]bool {
	t.Helper()
	var flags map[string]bool
	read := func() {
		c, err := ethtool.New()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pf, err := c.PrivateFlags(ethtool.Interface{Name: ifName})
		if err != nil {
			t.Fatalf("private flags of %s: %v", ifName, err)
		}
		flags = pf.Flags
	}
	if path == "" {
		read()
	} else {
		netnstest.Do(t, path, read)
	}
	return flags
}

// TestIGB_PrivateFlags: a claim's privateFlags on a real igb interface
// (the 82576 PF as a host device): Setup keeps the flag's value from the
// host, Attach moves the link into the pod and turns legacy-rx over there,
// as ethtool netlink reads it back in the pod, and Detach brings the link
// back to the host with the flag as it was.
func TestIGB_PrivateFlags(t *testing.T) {
	kernelrig.Require(t)
	_, pf := igbPF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	mover, err := link.NewMover(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	srv := New(log, Factories{
		Host: func(_ string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			return hostdev.New(log, "/sys", c, hostdev.WithResync(time.Hour))
		},
	}, mover)
	t.Cleanup(srv.Wait)
	t.Cleanup(srv.Close)
	if _, err := srv.Configure(ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{pf}}}}); err != nil {
		t.Fatal(err)
	}
	var dev *devicev1.Device
	waitUntil(t, 30*time.Second, pf+" published by the host manager", func() bool {
		var ok bool
		dev, ok = srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_HOST, pf)
		return ok
	})

	before := privateFlags(t, "", pf)
	orig, ok := before["legacy-rx"]
	if !ok {
		t.Fatalf("%s has no private flag legacy-rx: %v", pf, before)
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", LinkSettings: &devicev1.LinkSettings{PrivateFlags: map[string]bool{"legacy-rx": !orig}}}
	setup, err := srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	if got, ok := pd.GetOriginalLink().GetSettings().GetPrivateFlags()["legacy-rx"]; !ok || got != orig {
		t.Errorf("legacy-rx kept at Setup: %t (present %t), want %t", got, ok, orig)
	}
	pod := netnstest.New(t)
	if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: pod, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	inPod := privateFlags(t, pod, "net1")
	if inPod["legacy-rx"] != !orig {
		t.Errorf("private flags of net1 in the pod: %v, want legacy-rx %t", inPod, !orig)
	}
	t.Logf("%s: private flags %v in the host before, %v in the pod", pf, before, inPod)
	if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: pod, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if got := privateFlags(t, "", pf); got["legacy-rx"] != orig {
		t.Errorf("private flags of %s after Detach: %v, want legacy-rx %t as before (%v)", pf, got, orig, before)
	}
}
