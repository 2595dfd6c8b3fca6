//go:build !kernelrig

package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// restoreWorld is a provisioner with the real dummy manager (2 devices)
// and the real host manager, whose host netns is a throwaway one holding
// eth0 (a default route goes through it), br0 (another default route)
// with its port eth2, and eth1, the one interface offered; the host
// manager's filter (eth*, br0) selects all four.
type restoreWorld struct {
	srv      *Server
	hostPath string
	links    func() []string
}

func newRestoreWorld(t *testing.T) *restoreWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	w := &restoreWorld{hostPath: netnstest.New(t)}
	h := netnstest.Handle(t, w.hostPath)
	for _, v := range []netnstest.Veth{{Name: "eth0", Peer: "p0"}, {Name: "eth1", Peer: "p1"}, {Name: "eth2", Peer: "p2"}} {
		netnstest.AddVeth(t, h, v)
	}
	ns := strings.TrimPrefix(w.hostPath, "/run/netns/")
	nodetest.IP(t, "-n", ns, "link", "add", "br0", "type", "bridge")
	nodetest.IP(t, "-n", ns, "link", "set", "eth2", "master", "br0")
	nodetest.IP(t, "-n", ns, "link", "set", "br0", "up")
	nodetest.IP(t, "-n", ns, "addr", "add", "192.0.2.2/24", "dev", "eth0")
	nodetest.IP(t, "-n", ns, "addr", "add", "198.51.100.2/24", "dev", "br0")
	nodetest.IP(t, "-n", ns, "route", "add", "default", "via", "192.0.2.1", "dev", "eth0", "metric", "100")
	nodetest.IP(t, "-n", ns, "route", "add", "default", "via", "198.51.100.1", "dev", "br0", "metric", "200")
	w.links = func() []string { return netnstest.LinkNames(t, h) }

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sysfs := t.TempDir()
	w.srv = New(log, Factories{
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) { return dummy.New(log, c) },
		Host: func(_ string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			return hostdev.New(log, sysfs, c, hostdev.WithNetns(w.hostPath), hostdev.WithResync(time.Hour))
		},
	}, nil)
	t.Cleanup(w.srv.Close)
	if _, err := w.srv.Configure(ctxFor(t), &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2},
		Host:  &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth*", "br0"}}}}); err != nil {
		t.Fatal(err)
	}
	return w
}

// setUp is what the real Setup of a device of the inventory records.
func (w *restoreWorld) setUp(t *testing.T, kind devicev1.DeviceManager, name string) *devicev1.PreparedDevice {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dev, ok := w.srv.inv.find(kind, name); ok {
			resp, err := w.srv.Setup(ctxFor(t), setupOf(dev, nil))
			if err != nil {
				t.Fatal(err)
			}
			return resp.GetPreparedDevice()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never published", name)
		}
	}
}

func marshal(t *testing.T, pd *devicev1.PreparedDevice) []byte {
	t.Helper()
	b, err := protojson.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestore_ForgedStatusData: Restore takes back what the real Setup
// recorded, and refuses (InvalidArgument naming the field) claim status
// data that names an interface the host manager never offers (the
// default-route uplink, a bridge port of one), a device under another's
// interface or another manager, or a restore recipe its manager's Setup
// never makes. Nothing on the node changes.
func TestRestore_ForgedStatusData(t *testing.T) {
	w := newRestoreWorld(t)
	eth1 := w.setUp(t, devicev1.DeviceManager_DEVICE_MANAGER_HOST, "eth1")
	dummy0 := w.setUp(t, devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, "dummy0")
	before := w.links()
	host := devicev1.DeviceManager_DEVICE_MANAGER_HOST
	forge := func(pd *devicev1.PreparedDevice, f func(*devicev1.PreparedDevice)) []byte {
		pd = proto.CloneOf(pd)
		f(pd)
		return marshal(t, pd)
	}
	hostLink := func(name string) func(*devicev1.PreparedDevice) {
		return func(pd *devicev1.PreparedDevice) {
			pd.Device.Name, pd.Device.KernelIfName, pd.OriginalLink.Name = name, name, name
		}
	}
	tests := []struct {
		name      string
		data      []byte
		wantField string // "" is success
	}{
		{"host interface as Setup recorded it", marshal(t, eth1), ""},
		{"dummy as Setup recorded it", marshal(t, dummy0), ""},
		{"the default-route uplink", forge(eth1, hostLink("eth0")), "data.device.name"},
		{"a port of a default-route bridge", forge(eth1, hostLink("eth2")), "data.device.name"},
		{"the default-route bridge", forge(eth1, hostLink("br0")), "data.device.name"},
		{"a dummy beyond the count", forge(dummy0, func(pd *devicev1.PreparedDevice) {
			pd.Device.Name, pd.Device.KernelIfName, pd.OriginalLink.Name = "dummy7", "dummy7", "dummy7"
		}), "data.device.name"},
		{"an offered device under the uplink's interface", forge(eth1, func(pd *devicev1.PreparedDevice) {
			pd.Device.KernelIfName, pd.OriginalLink.Name = "eth0", "eth0"
		}), "data.device.kernelIfName"},
		{"a dummy that moves a host link", forge(dummy0, func(pd *devicev1.PreparedDevice) {
			pd.Device.KernelIfName, pd.OriginalLink.Name, pd.LinkCreated = "eth0", "eth0", false
		}), "data.device.kernelIfName"},
		{"a dummy whose link is moved, not created", forge(dummy0, func(pd *devicev1.PreparedDevice) { pd.LinkCreated = false }), "data.linkCreated"},
		{"a host interface under the dummy manager", forge(eth1, func(pd *devicev1.PreparedDevice) {
			pd.Device.Manager = devicev1.DeviceManager_DEVICE_MANAGER_DUMMY
		}), "data.device.name"},
		{"a device of a manager that is not running", forge(eth1, func(pd *devicev1.PreparedDevice) {
			pd.Device.Manager, pd.OriginalVf = devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, &devicev1.VfSnapshot{}
		}), "data.device.manager"},
		{"renamed to the uplink's name at Detach", forge(eth1, func(pd *devicev1.PreparedDevice) { pd.OriginalLink.Name = "eth0" }), "data.originalLink.name"},
		{"VF settings for a host interface", forge(eth1, func(pd *devicev1.PreparedDevice) { pd.OriginalVf = &devicev1.VfSnapshot{Trust: true} }), "data.originalVf"},
		{"another PCI function", forge(eth1, func(pd *devicev1.PreparedDevice) { pd.Device.PciAddress = "0000:03:00.1" }), "data.device.pciAddress"},
		{"a VF index on a host interface", forge(eth1, func(pd *devicev1.PreparedDevice) { pd.Device.VfIndex = new(int32(0)) }), "data.device.vfIndex"},
		{"programs on a dummy", forge(dummy0, func(pd *devicev1.PreparedDevice) {
			pd.DetachedEbpfPrograms = []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP}}
		}), "data.detachedEbpfPrograms"},
		{"truncated", marshal(t, eth1)[:40], "data"},
		{"empty", nil, "data"},
		{"not JSON", []byte("\x00\xff"), "data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := w.srv.Restore(ctxFor(t), &provisionerv1.RestoreRequest{Data: tt.data})
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				kind := resp.GetPreparedDevice().GetDevice().GetManager()
				inv, _ := w.srv.inv.find(kind, resp.GetPreparedDevice().GetDevice().GetName())
				if diff := cmp.Diff(inv, resp.GetPreparedDevice().GetDevice(), protocmp.Transform()); diff != "" {
					t.Errorf("restored device is not the inventory's (-inventory +restored):\n%s", diff)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tt.wantField || status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Restore = %v, %v; want InvalidArgument on %s", resp, err, tt.wantField)
			}
			t.Log(err)
		})
	}
	if after := w.links(); !slices.Equal(before, after) {
		t.Errorf("links %v became %v", before, after)
	}
	if d, ok := w.srv.inv.find(host, "eth0"); ok {
		t.Errorf("the uplink is offered: %v", d)
	}
}

// TestRestore_WaitsForTheInventory: a Restore right after Configure waits
// for the manager's first report (dra configures, then recovers), and a
// manager that never reports is Unavailable, to be tried again.
func TestRestore_WaitsForTheInventory(t *testing.T) {
	h := newHarness(t)
	if _, err := h.client.Configure(ctxFor(t), dummyCfg(1)); err != nil {
		t.Fatal(err)
	}
	pd := &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0"},
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0"}, LinkCreated: true}
	data := marshal(t, pd)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := h.client.Restore(short, &provisionerv1.RestoreRequest{Data: data}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Restore before the first report = %v, want Unavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Restore(ctxFor(t), &provisionerv1.RestoreRequest{Data: data})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	h.latestDummy().devices <- []*devicev1.Device{pd.GetDevice()}
	if err := <-done; err != nil {
		t.Fatalf("Restore after the first report: %v", err)
	}
}
