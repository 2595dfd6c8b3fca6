package hostdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// TestRun_Select checks which interfaces each configuration offers, on veth
// pairs tst0a/tst0b, data0/dpeer0, data1/dpeer1 (IPv4 default route),
// data6/dpeer6 (IPv6 default route), Up_0/upeer0 (not a DNS label),
// data3/dpeer3 (data3 a port of the bridge br0, which holds a default
// route) and data5/dpeer5 (the lower link of macvlan mv0, which holds a
// default route).
func TestRun_Select(t *testing.T) {
	ns := newTestNs(t)
	for _, p := range [][2]string{{"tst0a", "tst0b"}, {"data0", "dpeer0"}, {"data1", "dpeer1"}, {"data6", "dpeer6"},
		{"Up_0", "upeer0"}, {"data3", "dpeer3"}, {"data5", "dpeer5"}} {
		ns.addVeth(t, p[0], p[1])
	}
	ns.addDefaultRoute(t, "data1", false)
	ns.addDefaultRoute(t, "data6", true)
	ns.addBridge(t, "br0", "data3")
	ns.addDefaultRoute(t, "br0", true)
	ns.addMacvlan(t, "mv0", "data5")
	ns.addDefaultRoute(t, "mv0", true)
	up0 := deviceName("Up_0")

	for _, tc := range []struct {
		name string
		cfg  *provisionerv1.HostConfig
		want []string
	}{
		{"exact names", &provisionerv1.HostConfig{IfNames: []string{"tst0a", "data0"}}, []string{"data0", "tst0a"}},
		{"glob", &provisionerv1.HostConfig{IfNames: []string{"data*"}}, []string{"data0"}},
		{"IPv4 default route holder named", &provisionerv1.HostConfig{IfNames: []string{"data1", "tst0a"}}, []string{"tst0a"}},
		{"IPv6 default route holder named", &provisionerv1.HostConfig{IfNames: []string{"data6"}}, nil},
		{"bridge port and macvlan lower link of uplinks", &provisionerv1.HostConfig{IfNames: []string{"data3", "data5", "br0", "mv0", "dpeer3", "dpeer5"}},
			[]string{"dpeer3", "dpeer5"}},
		{"driver", &provisionerv1.HostConfig{Drivers: []string{"veth"}},
			[]string{"data0", "dpeer0", "dpeer1", "dpeer3", "dpeer5", "dpeer6", "tst0a", "tst0b", up0, "upeer0"}},
		{"glob and driver", &provisionerv1.HostConfig{IfNames: []string{"*peer*"}, Drivers: []string{"veth"}},
			[]string{"dpeer0", "dpeer1", "dpeer3", "dpeer5", "dpeer6", "upeer0"}},
		{"bridge by driver", &provisionerv1.HostConfig{Drivers: []string{"bridge", "macvlan"}}, nil},
		{"other driver", &provisionerv1.HostConfig{IfNames: []string{"data*"}, Drivers: []string{"e1000e"}}, nil},
		{"vendor ID without sysfs", &provisionerv1.HostConfig{VendorIds: []string{"0x8086"}}, nil},
		{"loopback never", &provisionerv1.HostConfig{IfNames: []string{"lo", "tst0b"}}, []string{"tst0b"}},
		{"name sanitized", &provisionerv1.HostConfig{IfNames: []string{"Up_0"}}, []string{up0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(testLogger(t), t.TempDir(), tc.cfg, WithNetns(ns.path))
			if err != nil {
				t.Fatal(err)
			}
			startRun(t, m).waitNames(t, tc.want...)
		})
	}
}

// TestRun_Device checks a published device in full, with details from a
// fake sysfs tree: a PCI NIC's driver wins over the link kind.
func TestRun_Device(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "data0", "dpeer0")
	ns.addVeth(t, "tst0a", "tst0b")
	if err := ns.h.LinkSetMTU(ns.link(t, "tst0a"), 1400); err != nil {
		t.Fatal(err)
	}
	sysfs := t.TempDir()
	d0 := ns.link(t, "data0").Attrs()
	addFakeNIC(t, sysfs, fakeNIC{ifName: "data0", ifIndex: d0.Index, pci: "0000:03:00.0", vendor: "0x8086", device: "0x10d3", driver: "e1000e", numa: "1"})
	addFakeNIC(t, sysfs, fakeNIC{ifName: "tst0a", ifIndex: ns.link(t, "tst0a").Attrs().Index})
	addFakeNIC(t, sysfs, fakeNIC{ifName: "dpeer0", ifIndex: 999, pci: "0000:04:00.0", vendor: "0x8086", device: "0x10d3", driver: "e1000e"})
	ta := ns.link(t, "tst0a").Attrs()
	data0 := &devicev1.Device{
		Name: "data0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "data0",
		PciAddress: "0000:03:00.0", VendorId: "0x8086", DeviceId: "0x10d3", Driver: "e1000e",
		NumaNode: proto.Int32(1), PcieRoot: "pci0000:00", MacAddress: d0.HardwareAddr.String(), Mtu: 1500,
		LinkState: devicev1.LinkState_LINK_STATE_UP,
	}
	tst0a := &devicev1.Device{
		Name: "tst0a", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "tst0a",
		Driver: "veth", MacAddress: ta.HardwareAddr.String(), Mtu: 1400,
		LinkState: devicev1.LinkState_LINK_STATE_UP,
	}
	for _, tc := range []struct {
		name string
		cfg  *provisionerv1.HostConfig
		want []*devicev1.Device
	}{
		{"by vendor", &provisionerv1.HostConfig{VendorIds: []string{"0x8086"}}, []*devicev1.Device{data0}},
		{"by device, upper case", &provisionerv1.HostConfig{DeviceIds: []string{"0x10D3"}}, []*devicev1.Device{data0}},
		{"by PCI driver", &provisionerv1.HostConfig{Drivers: []string{"e1000e"}}, []*devicev1.Device{data0}},
		{"by vendor and name", &provisionerv1.HostConfig{IfNames: []string{"tst*", "data0"}, VendorIds: []string{"0x8086"}}, []*devicev1.Device{data0}},
		{"virtual", &provisionerv1.HostConfig{IfNames: []string{"tst0a"}}, []*devicev1.Device{tst0a}},
		{"other vendor", &provisionerv1.HostConfig{VendorIds: []string{"0x15b3"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(testLogger(t), sysfs, tc.cfg, WithNetns(ns.path))
			if err != nil {
				t.Fatal(err)
			}
			got := startRun(t, m).waitNames(t, names(tc.want)...)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform(), cmpEmpty); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpEmpty makes a nil and an empty inventory equal.
var cmpEmpty = cmp.FilterValues(func(a, b []*devicev1.Device) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

// TestRun_Events follows the inventory through link and route changes with
// the resync out of the way, so only events can explain each update.
func TestRun_Events(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "data0", "dpeer0")
	ns.addVeth(t, "data1", "dpeer1")
	gw1 := ns.addDefaultRoute(t, "data1", false)
	logs := newLogCounter(t)
	m, err := New(slog.New(logs), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"data*"}},
		WithNetns(ns.path), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	r.waitNames(t, "data0")

	// Links that are not selected change nothing that is published.
	ns.addVeth(t, "other0", "other1")
	ns.addVeth(t, "data2", "dpeer2")
	r.waitNames(t, "data0", "data2")
	r.waitLinkState(t, "data2", devicev1.LinkState_LINK_STATE_UP)
	// Each publication changed something (data2 appeared, then came up):
	// one that other0 caused would repeat the one before it.
	r.mu.Lock()
	for i := 1; i < len(r.all); i++ {
		if cmp.Equal(r.all[i-1], r.all[i], protocmp.Transform()) {
			t.Errorf("publication %d repeats the one before: an unselected link must not cause a publication", i+1)
		}
	}
	r.mu.Unlock()

	ns.delLink(t, "data0")
	r.waitNames(t, "data2")

	gw2 := ns.addDefaultRoute(t, "data2", true)
	r.waitNames(t)

	if err := ns.h.RouteDel(gw2); err != nil {
		t.Fatal(err)
	}
	r.waitNames(t, "data2")

	if err := ns.h.RouteDel(gw1); err != nil {
		t.Fatal(err)
	}
	r.waitNames(t, "data1", "data2")

	if err := ns.h.LinkSetMTU(ns.link(t, "data2"), 9000); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		devs, _ := r.get()
		if len(devs) == 2 && devs[1].GetMtu() == 9000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MTU change of data2 was not published: %v", devs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff(map[string]int{"data1": 1, "data2": 1}, logs.get(withheldMsg)); diff != "" {
		t.Errorf("%q logged per interface (-want +got):\n%s", withheldMsg, diff)
	}
}

const withheldMsg = "not offering interface: a default route of the host goes through it"

// logCounter counts log records by message and "interface" attribute
// (given to the record, not through With).
type logCounter struct {
	slog.Handler
	*counts
}

type counts struct {
	mu sync.Mutex
	n  map[string]int // message + "/" + interface
}

func newLogCounter(t *testing.T) *logCounter {
	return &logCounter{Handler: testLogger(t).Handler(), counts: &counts{n: map[string]int{}}}
}

func (c *logCounter) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "interface" {
			c.mu.Lock()
			c.n[r.Message+"/"+a.Value.String()]++
			c.mu.Unlock()
		}
		return true
	})
	return c.Handler.Handle(ctx, r)
}

func (c *logCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logCounter{Handler: c.Handler.WithAttrs(attrs), counts: c.counts}
}

func (c *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{Handler: c.Handler.WithGroup(name), counts: c.counts}
}

// get returns the counts of msg by interface.
func (c *logCounter) get(msg string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, n := range c.n {
		if iface, ok := strings.CutPrefix(k, msg+"/"); ok {
			out[iface] = n
		}
	}
	return out
}

// TestRun_Resync: sysfs has no events, so a device that appears there is
// found by the resync alone.
func TestRun_Resync(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "data0", "dpeer0")
	sysfs := t.TempDir()
	m, err := New(testLogger(t), sysfs, &provisionerv1.HostConfig{VendorIds: []string{"0x8086"}},
		WithNetns(ns.path), WithResync(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	r.waitNames(t)
	addFakeNIC(t, sysfs, fakeNIC{ifName: "data0", ifIndex: ns.link(t, "data0").Attrs().Index, pci: "0000:03:00.0", vendor: "0x8086", device: "0x10d3"})
	r.waitNames(t, "data0")
}

func TestRun_BadNetns(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	path := netnstest.New(t)
	m, err := New(testLogger(t), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"eth0"}}, WithNetns(path))
	if err != nil {
		t.Fatal(err)
	}
	m.ns = netlinkns.At("/proc/self/ns/uts")
	err = m.Run(t.Context(), func([]*devicev1.Device) { t.Error("published without a namespace") })
	if !errors.Is(err, netlinkns.ErrNotNetns) {
		t.Fatalf("Run() = %v, want %v", err, netlinkns.ErrNotNetns)
	}
}

func TestSetup(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "tst0a", "tst0b")
	ns.addVeth(t, "data1", "dpeer1")
	ns.addDefaultRoute(t, "data1", false)
	ns.addVeth(t, "data3", "dpeer3")
	ns.addBridge(t, "br0", "data3")
	ns.addDefaultRoute(t, "br0", false)
	l := ns.link(t, "tst0a")
	if err := ns.h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := ns.h.LinkSetMTU(l, 1400); err != nil {
		t.Fatal(err)
	}
	mac := l.Attrs().HardwareAddr.String()
	m, err := New(testLogger(t), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"tst0a", "data*", "gone*"}}, WithNetns(ns.path))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		dev     *devicev1.Device
		cfg     *devicev1.DeviceConfig
		want    *devicev1.PreparedDevice
		wantErr error
	}{
		{"records the link", hostDev("tst0a"), &devicev1.DeviceConfig{PodIfName: "net1"}, &devicev1.PreparedDevice{
			Device:       hostDev("tst0a"),
			OriginalLink: &devicev1.LinkSnapshot{Name: "tst0a", MacAddress: mac, Mtu: 1400, Up: false},
		}, nil},
		{"default route holder", hostDev("data1"), nil, nil, ErrDefaultRoute},
		{"port of the default route holder", hostDev("data3"), nil, nil, ErrDefaultRoute},
		{"missing", hostDev("gone0"), nil, nil, ErrLinkNotFound},
		{"not selected", hostDev("tst0b"), nil, nil, ErrNotSelected},
		{"VF setting", hostDev("tst0a"), &devicev1.DeviceConfig{Trust: proto.Bool(true)}, nil, fielderr.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd, err := m.Setup(t.Context(), tc.dev, tc.cfg, "")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Setup() = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				t.Log(err)
			}
			if diff := cmp.Diff(tc.want, pd, protocmp.Transform()); diff != "" {
				t.Errorf("prepared device (-want +got):\n%s", diff)
			}
			if pd != nil {
				for i := range 2 {
					if err := m.Free(t.Context(), pd); err != nil {
						t.Errorf("Free() #%d = %v", i+1, err)
					}
				}
			}
		})
	}
	if got := ns.link(t, "tst0a").Attrs(); got.MTU != 1400 || got.HardwareAddr.String() != mac || got.Flags&1 != 0 {
		t.Errorf("Setup or Free changed tst0a: mtu %d, mac %s, flags %v", got.MTU, got.HardwareAddr, got.Flags)
	}
}

// TestSetup_WhileRunning: while Run follows the host's link events, Setup
// reads the links from Run's cache instead of dumping them all (with 200
// veth pairs, what one Setup allocates falls below a quarter of a dumping
// Setup's), and still refuses an interface that became a port of a bridge
// holding a default route after Run started; once Run returns, Setup dumps
// again.
func TestSetup_WhileRunning(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "tst0a", "tst0b")
	ns.addVeth(t, "data3", "dpeer3")
	for i := range 200 {
		ns.addVeth(t, fmt.Sprintf("pad%d", i), fmt.Sprintf("pap%d", i))
	}
	cfg := &provisionerv1.HostConfig{IfNames: []string{"tst0a", "data3"}}
	dumping, err := New(testLogger(t), t.TempDir(), cfg, WithNetns(ns.path))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(testLogger(t), t.TempDir(), cfg, WithNetns(ns.path))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	r := &recorder{}
	go func() {
		done <- m.Run(ctx, func(devs []*devicev1.Device) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.latest, r.count = devs, r.count+1
		})
	}()
	r.waitNames(t, "data3", "tst0a")

	setupBytes := func(m *Manager) uint64 {
		t.Helper()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		pd, err := m.Setup(t.Context(), hostDev("tst0a"), nil, "")
		runtime.ReadMemStats(&after)
		if err != nil || pd.GetOriginalLink().GetName() != "tst0a" {
			t.Fatalf("Setup(tst0a) = %v, %v", pd, err)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	cached, dumped := setupBytes(m), setupBytes(dumping)
	t.Logf("one Setup allocated %d bytes from the cache, %d with a dump of %d links", cached, dumped, 2*202+1)
	if cached > dumped/4 {
		t.Errorf("Setup while Run runs allocated %d bytes, a dumping one %d: want under a quarter", cached, dumped)
	}

	ns.addBridge(t, "br0", "data3")
	ns.addDefaultRoute(t, "br0", false)
	r.waitNames(t, "tst0a") // the cache saw data3 join br0
	if _, err := m.Setup(t.Context(), hostDev("data3"), nil, ""); !errors.Is(err, ErrDefaultRoute) {
		t.Errorf("Setup(data3), a port of the default route's bridge = %v, want %v", err, ErrDefaultRoute)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v after cancel, want nil", err)
	}
	if _, ok := m.links.cached(); ok {
		t.Error("the link cache is still valid after Run returned, with no events to keep it")
	}
	if _, err := m.Setup(t.Context(), hostDev("data3"), nil, ""); !errors.Is(err, ErrDefaultRoute) {
		t.Errorf("Setup(data3) after Run = %v, want %v", err, ErrDefaultRoute)
	}
}
