package sriov

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// fakePCI is the PCI core over a fake sysfs tree, for the writes the
// manager makes to bind a VF: it records each write (as "<path under the
// root, through a driver link as the driver's directory> <value>") and
// does what the kernel does with it: driver_override stored, unbind
// removes the driver link and the driver's netdev, drivers_probe binds a
// device that has no driver to its override, or else to its native
// driver, and that driver makes a netdev (netdev, mac). A probe of a
// driver in refuse binds nothing; one after delay binds in the
// background.
type fakePCI struct {
	tb     testing.TB
	root   string
	native map[string]string // PCI address: the driver a probe without an override picks
	refuse map[string]bool
	delay  time.Duration
	fail   map[string]error // by file name: the write fails, with no effect
	netdev string
	mac    string
	// written, when set, is told of each write (its path under root and
	// its value) as it is made, under k's lock.
	written func(rel, value string)

	mu     sync.Mutex
	wg     sync.WaitGroup
	writes []string
}

func newFakePCI(tb testing.TB, root string, native map[string]string) *fakePCI {
	k := &fakePCI{tb: tb, root: root, native: native, refuse: map[string]bool{}, netdev: "eth7", mac: "02:11:22:33:44:55"}
	tb.Cleanup(k.wg.Wait)
	return k
}

// ops is vfioOps over k and nd, with short waits.
func (k *fakePCI) ops(nd netdevs) vfioOps {
	return vfioOps{write: k.write, netdevs: nd, timeout: 200 * time.Millisecond, poll: time.Millisecond}
}

func (k *fakePCI) takeWrites() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.writes
	k.writes = nil
	return w
}

func (k *fakePCI) write(path, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir := filepath.Dir(path)
	if filepath.Base(dir) == "driver" {
		resolved, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return fmt.Errorf("no driver: %w", err)
		}
		dir = resolved
	}
	rel, err := filepath.Rel(k.root, filepath.Join(dir, filepath.Base(path)))
	if err != nil {
		k.tb.Errorf("write outside the tree: %s", path)
		return err
	}
	k.writes = append(k.writes, rel+" "+value)
	if k.written != nil {
		k.written(rel, value)
	}
	if err := k.fail[filepath.Base(path)]; err != nil {
		return err
	}
	switch {
	case filepath.Base(path) == "driver_override":
		v := strings.TrimSuffix(value, "\n")
		if v == "" {
			v = noOverride
		}
		return os.WriteFile(path, []byte(v+"\n"), 0o644)
	case filepath.Base(path) == "unbind":
		addr := filepath.Base(filepath.Dir(filepath.Dir(path)))
		if value != addr {
			return fmt.Errorf("unbind %q through the driver link of %s", value, addr)
		}
		k.unbind(addr)
		return nil
	case rel == "bus/pci/drivers_probe":
		return k.probe(value)
	}
	k.tb.Errorf("write to an unexpected file %s", rel)
	return errors.New("unexpected file")
}

func (k *fakePCI) devDir(addr string) string {
	return filepath.Join(k.root, "bus/pci/devices", addr)
}

// unbind removes addr's driver link and its netdevs.
func (k *fakePCI) unbind(addr string) {
	dev := k.devDir(addr)
	if err := os.Remove(filepath.Join(dev, "driver")); err != nil {
		k.tb.Error(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dev, "net"))
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.root, "class/net", e.Name())); err != nil {
			k.tb.Error(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dev, "net")); err != nil {
		k.tb.Error(err)
	}
}

func (k *fakePCI) probe(addr string) error {
	dev := k.devDir(addr)
	if _, err := os.Lstat(dev); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dev, "driver")); err == nil {
		return nil
	}
	drv, _ := readString(filepath.Join(dev, "driver_override"))
	if drv == "" || drv == noOverride {
		drv = k.native[addr]
	}
	if _, err := os.Stat(filepath.Join(k.root, "bus/pci/drivers", drv)); drv == "" || err != nil || k.refuse[drv] {
		return nil
	}
	if k.delay == 0 {
		k.bind(addr, drv)
		return nil
	}
	k.wg.Add(1)
	time.AfterFunc(k.delay, func() {
		defer k.wg.Done()
		k.mu.Lock()
		defer k.mu.Unlock()
		k.bind(addr, drv)
	})
	return nil
}

// bind links addr to drv; a netdev driver (the device's native one, not
// vfio-pci) makes a netdev.
func (k *fakePCI) bind(addr, drv string) {
	real, err := filepath.EvalSymlinks(k.devDir(addr))
	if err != nil {
		k.tb.Error(err)
		return
	}
	dir, _ := filepath.Rel(k.root, real)
	ns := []node{{path: dir + "/driver", target: "bus/pci/drivers/" + drv}}
	if drv != k.native[addr] || drv == VfioDriver || k.netdev == "" {
		writeNodes(k.tb, k.root, ns)
		return
	}
	// The netdev appears whole, as the kernel registers it before its
	// sysfs entries show: made aside (at the same depth, so that its
	// relative links hold) and renamed into net/ at once, its class link
	// first.
	net, staged := dir+"/net/"+k.netdev, dir+"/.staged/"+k.netdev
	ns = append(ns,
		node{path: "class/net/" + k.netdev, target: net},
		node{path: staged + "/address", file: k.mac},
		node{path: staged + "/mtu", file: "1500"},
		node{path: staged + "/device", target: dir})
	writeNodes(k.tb, k.root, ns)
	if err := os.MkdirAll(filepath.Join(k.root, dir, "net"), 0o755); err != nil {
		k.tb.Error(err)
		return
	}
	if err := os.Rename(filepath.Join(k.root, staged), filepath.Join(k.root, net)); err != nil {
		k.tb.Error(err)
	}
}

// fakeNetdevs is netdevs over the fake tree: it records each call as
// "<name> -> <want>" and renames the netdev's directory and rewrites its
// address and mtu files, as the kernel would show them.
type fakeNetdevs struct {
	tb    testing.TB
	root  string
	err   error
	mu    sync.Mutex
	calls []string
}

func (f *fakeNetdevs) SetIdentity(name string, want *devicev1.LinkSnapshot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s -> %s %s mtu %d up %t", name, want.GetName(), want.GetMacAddress(), want.GetMtu(), want.GetUp()))
	if f.err != nil {
		return f.err
	}
	class := filepath.Join(f.root, "class/net", name)
	dir, err := filepath.EvalSymlinks(class)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "address"), []byte(want.GetMacAddress()+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "mtu"), []byte(fmt.Sprintf("%d\n", want.GetMtu())), 0o644); err != nil {
		return err
	}
	if name == want.GetName() {
		return nil
	}
	to := filepath.Join(filepath.Dir(dir), want.GetName())
	if err := os.Rename(dir, to); err != nil {
		return err
	}
	if err := os.Remove(class); err != nil {
		return err
	}
	rel, _ := filepath.Rel(filepath.Join(f.root, "class/net"), to)
	return os.Symlink(rel, filepath.Join(f.root, "class/net", want.GetName()))
}

func (f *fakeNetdevs) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// The vfio fixture: intelPF with its VF 0 on iavf (netdev ens1f0v0) alone
// in IOMMU group 17, on a node with vfio-pci loaded.
var vfioVF = func() pciDev {
	d := intelVF0
	d.iommuGroup = "17"
	return d
}()

const vfioVFDir = "devices/pci0000:00/0000:00:02.0/0000:03:02.0"

// vfioRig is a manager over the vfio fixture (plus extra nodes) with a
// fake kernel and fake netdevs.
type vfioRig struct {
	root  string
	m     *Manager
	k     *fakePCI
	nd    *fakeNetdevs
	links *fakeLinks
}

func newVfioRig(t *testing.T, vf pciDev, extra ...node) *vfioRig {
	t.Helper()
	ns := append(intelPF.nodes(), vf.nodes()...)
	ns = append(ns,
		node{path: "bus/pci/drivers/" + VfioDriver},
		node{path: "bus/pci/drivers/iavf"},
		node{path: "bus/pci/drivers_probe", file: ""},
		node{path: "devices/pci0000:00/0000:00:02.0/" + vf.addr + "/driver_override", file: noOverride})
	if vf.iommuGroup != "" {
		ns = append(ns, node{path: "kernel/iommu_groups/" + vf.iommuGroup + "/devices/" + vf.addr,
			target: "devices/pci0000:00/0000:00:02.0/" + vf.addr})
	}
	root := buildTree(t, append(ns, extra...))
	r := &vfioRig{root: root, nd: &fakeNetdevs{tb: t, root: root}}
	r.k = newFakePCI(t, root, map[string]string{vf.addr: "iavf"})
	r.links = &fakeLinks{vfs: map[string][]vfState{"ens1f0": {fresh, fresh}},
		links: map[string]*devicev1.LinkSnapshot{"ens1f0v0": {Name: "ens1f0v0", MacAddress: vf.mac, Mtu: 1500, Up: true}}}
	m, err := New(testLogger(t), root, nil, withLinks(r.links), withVfioOps(r.k.ops(r.nd)))
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	return r
}

// vf returns the VF at addr as discovery sees it now.
func (r *vfioRig) vf(t *testing.T, addr string) *devicev1.Device {
	t.Helper()
	devs, err := Discover(r.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.GetPciAddress() == addr {
			return d
		}
	}
	t.Fatalf("%s not discovered", addr)
	return nil
}

func diffStrings(t *testing.T, what string, want, got []string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// A VF on its netdev driver whose claim asks for vfio: Setup binds it to
// vfio-pci (override, unbind, probe, in that order), and the prepared
// device is the VF as discovery then sees it, with its group's device
// nodes and what Free needs; Free binds it back to its driver, with its
// netdev's name, MAC, MTU and admin state; a second Free changes nothing.
func TestVfio_BindAndFree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{name: "the kernel binds at once"},
		{name: "the kernel binds in the background", delay: 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newVfioRig(t, vfioVF)
			r.k.delay = tc.delay
			before := r.vf(t, vfioVF.addr)
			pd, err := r.m.Setup(t.Context(), before, &devicev1.DeviceConfig{Vfio: new(true)}, "")
			if err != nil {
				t.Fatal(err)
			}
			diffStrings(t, "Setup's writes", []string{
				"bus/pci/devices/0000:03:02.0/driver_override vfio-pci\n",
				"bus/pci/drivers/iavf/unbind 0000:03:02.0",
				"bus/pci/drivers_probe 0000:03:02.0",
			}, r.k.takeWrites())
			bound := r.vf(t, vfioVF.addr)
			if bound.GetDriver() != VfioDriver {
				t.Fatalf("VF on %q after Setup, want %s", bound.GetDriver(), VfioDriver)
			}
			want := &devicev1.PreparedDevice{
				Device: bound,
				DeviceNodes: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/17", Path: "/dev/vfio/17"},
					{HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}},
				VfioBinding: &devicev1.VfioBinding{OriginalDriver: "iavf",
					OriginalNetdev: &devicev1.LinkSnapshot{Name: "ens1f0v0", MacAddress: vfioVF.mac, Mtu: 1500, Up: true}},
			}
			if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
				t.Errorf("prepared device (-want +got):\n%s", diff)
			}
			if c := r.links.takeCalls(); len(c) > 0 {
				t.Errorf("a config with no VF setting changed the PF: %q", c)
			}

			if err := r.m.Free(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			diffStrings(t, "Free's writes", []string{
				"bus/pci/devices/0000:03:02.0/driver_override \n",
				"bus/pci/drivers/vfio-pci/unbind 0000:03:02.0",
				"bus/pci/drivers_probe 0000:03:02.0",
			}, r.k.takeWrites())
			diffStrings(t, "Free's netdev calls", []string{"eth7 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}, r.nd.takeCalls())
			if diff := cmp.Diff(before, r.vf(t, vfioVF.addr), protocmp.Transform()); diff != "" {
				t.Errorf("VF after Free (-before Setup +after Free):\n%s", diff)
			}
			if o := readFile(t, filepath.Join(r.root, vfioVFDir, "driver_override")); o != noOverride {
				t.Errorf("driver_override %q after Free, want it cleared", o)
			}

			if err := r.m.Free(t.Context(), pd); err != nil {
				t.Fatalf("second Free: %v", err)
			}
			diffStrings(t, "second Free's writes", nil, r.k.takeWrites())
			diffStrings(t, "second Free's netdev calls", []string{"ens1f0v0 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}, r.nd.takeCalls())
		})
	}
}

// A bind the kernel does not make in time, or whose Setup is cancelled, is
// undone before Setup returns: the VF back on its driver with its netdev
// as it was, and the VF settings Setup had made put back.
func TestVfio_BindFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cancel  bool
		wantErr error
	}{
		{name: "vfio-pci never binds", wantErr: ErrBindTimeout},
		{name: "the caller goes away", cancel: true, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newVfioRig(t, vfioVF)
			r.k.refuse[VfioDriver] = true
			before := r.vf(t, vfioVF.addr)
			ctx := t.Context()
			if tc.cancel {
				// The caller goes away once the bind has begun: while
				// Setup waits for a driver that will not bind.
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				r.k.written = func(rel, _ string) {
					if filepath.Base(rel) == "drivers_probe" {
						cancel()
					}
				}
			}
			_, err := r.m.Setup(ctx, before, &devicev1.DeviceConfig{Vfio: new(true), MacAddress: "02:aa:bb:cc:dd:ee"}, "")
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), before.GetName()) {
				t.Fatalf("Setup = %v, want %v naming the device", err, tc.wantErr)
			}
			t.Log(err)
			diffStrings(t, "writes", []string{
				"bus/pci/devices/0000:03:02.0/driver_override vfio-pci\n",
				"bus/pci/drivers/iavf/unbind 0000:03:02.0",
				"bus/pci/drivers_probe 0000:03:02.0",
				// The restore: the VF has no driver to unbind from.
				"bus/pci/devices/0000:03:02.0/driver_override \n",
				"bus/pci/drivers_probe 0000:03:02.0",
			}, r.k.takeWrites())
			diffStrings(t, "netdev calls", []string{"eth7 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}, r.nd.takeCalls())
			diffStrings(t, "VF settings", []string{"ens1f0/0 mac 02:aa:bb:cc:dd:ee", "ens1f0/0 mac 02:00:00:00:00:10"}, r.links.takeCalls())
			if diff := cmp.Diff(before, r.vf(t, vfioVF.addr), protocmp.Transform()); diff != "" {
				t.Errorf("VF after the failed Setup (-before +after):\n%s", diff)
			}
		})
	}
}

// A bind that fails before the VF left its driver (the unbind refused)
// only takes vfio-pci's driver_override back.
func TestVfio_UnbindFails(t *testing.T) {
	r := newVfioRig(t, vfioVF)
	errUnbind := errors.New("unbind: device busy")
	r.k.fail = map[string]error{"unbind": errUnbind}
	before := r.vf(t, vfioVF.addr)
	_, err := r.m.Setup(t.Context(), before, &devicev1.DeviceConfig{Vfio: new(true)}, "")
	if !errors.Is(err, errUnbind) || !strings.Contains(err.Error(), before.GetName()) {
		t.Fatalf("Setup = %v, want %v naming the device", err, errUnbind)
	}
	diffStrings(t, "writes", []string{
		"bus/pci/devices/0000:03:02.0/driver_override vfio-pci\n",
		"bus/pci/drivers/iavf/unbind 0000:03:02.0",
		"bus/pci/devices/0000:03:02.0/driver_override \n",
	}, r.k.takeWrites())
	diffStrings(t, "netdev calls", []string{"ens1f0v0 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}, r.nd.takeCalls())
	if diff := cmp.Diff(before, r.vf(t, vfioVF.addr), protocmp.Transform()); diff != "" {
		t.Errorf("VF after the failed Setup (-before +after):\n%s", diff)
	}
	if o := readFile(t, filepath.Join(r.root, vfioVFDir, "driver_override")); o != noOverride {
		t.Errorf("driver_override %q after the failed Setup, want it cleared", o)
	}
}

// What vfio cannot be given for is refused before anything changes, with
// an error naming the claim's field.
func TestVfio_Refusals(t *testing.T) {
	noGroup := vfioVF
	noGroup.iommuGroup = ""
	for _, tc := range []struct {
		name   string
		vf     pciDev
		extra  []node
		remove string // a path under the root the fixture loses
		cfg    *devicev1.DeviceConfig
		field  string
		says   string
	}{
		{name: "no IOMMU group", vf: noGroup, cfg: &devicev1.DeviceConfig{Vfio: new(true)},
			field: "config.vfio", says: "no IOMMU group"},
		{name: "a group with another device", vf: vfioVF, cfg: &devicev1.DeviceConfig{Vfio: new(true)},
			extra: []node{{path: "kernel/iommu_groups/17/devices/0000:03:00.0", target: "devices/pci0000:00/0000:00:02.0/0000:03:00.0"}},
			field: "config.vfio", says: "0000:03:00.0"},
		{name: "no vfio-pci driver", vf: vfioVF, cfg: &devicev1.DeviceConfig{Vfio: new(true)}, remove: "bus/pci/drivers/vfio-pci",
			field: "config.vfio", says: "vfio-pci module"},
		{name: "an MTU, which only a netdev takes", vf: vfioVF, cfg: &devicev1.DeviceConfig{Vfio: new(true), Mtu: 1400},
			field: "config.mtu", says: "no kernel netdev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newVfioRig(t, tc.vf, tc.extra...)
			if tc.remove != "" {
				if err := os.Remove(filepath.Join(r.root, tc.remove)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := r.m.Setup(t.Context(), r.vf(t, tc.vf.addr), tc.cfg, "")
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.says) {
				t.Fatalf("Setup = %v, want an error naming %s that says %q", err, tc.field, tc.says)
			}
			t.Log(err)
			diffStrings(t, "writes", nil, r.k.takeWrites())
			diffStrings(t, "VF settings", nil, r.links.takeCalls())
		})
	}
}

// Free finishes a restore that stopped half way (a provisioner that died
// in it), doing only what is left, and has nothing to do for a VF that is
// gone.
func TestVfio_FreeConverges(t *testing.T) {
	for _, tc := range []struct {
		name       string
		crash      func(r *vfioRig) // from the VF bound to vfio-pci by Setup
		wantWrites []string
		wantCalls  []string
		gone       bool
	}{
		{name: "unbound from vfio-pci", crash: func(r *vfioRig) {
			_ = r.k.write(filepath.Join(r.root, "bus/pci/devices/0000:03:02.0/driver_override"), "\n")
			_ = r.k.write(filepath.Join(r.root, "bus/pci/devices/0000:03:02.0/driver/unbind"), "0000:03:02.0")
		}, wantWrites: []string{
			"bus/pci/devices/0000:03:02.0/driver_override \n",
			"bus/pci/drivers_probe 0000:03:02.0",
		}, wantCalls: []string{"eth7 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}},
		{name: "back on its driver, netdev left", crash: func(r *vfioRig) {
			_ = r.k.write(filepath.Join(r.root, "bus/pci/devices/0000:03:02.0/driver_override"), "\n")
			_ = r.k.write(filepath.Join(r.root, "bus/pci/devices/0000:03:02.0/driver/unbind"), "0000:03:02.0")
			_ = r.k.write(filepath.Join(r.root, "bus/pci/drivers_probe"), "0000:03:02.0")
		}, wantCalls: []string{"eth7 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}},
		{name: "the VF is gone", gone: true, crash: func(r *vfioRig) {
			unplug(r.k.tb, r.root, vfioVF)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newVfioRig(t, vfioVF)
			before := r.vf(t, vfioVF.addr)
			pd, err := r.m.Setup(t.Context(), before, &devicev1.DeviceConfig{Vfio: new(true)}, "")
			if err != nil {
				t.Fatal(err)
			}
			tc.crash(r)
			r.k.takeWrites()
			if err := r.m.Free(t.Context(), pd); err != nil {
				t.Fatal(err)
			}
			diffStrings(t, "Free's writes", tc.wantWrites, r.k.takeWrites())
			diffStrings(t, "Free's netdev calls", tc.wantCalls, r.nd.takeCalls())
			if tc.gone {
				return
			}
			if diff := cmp.Diff(before, r.vf(t, vfioVF.addr), protocmp.Transform()); diff != "" {
				t.Errorf("VF after Free (-before Setup +after Free):\n%s", diff)
			}
		})
	}
}

// A VF bound to no driver goes to vfio-pci without an unbind, and back to
// no driver at Free, without a probe; it has no netdev to restore.
func TestVfio_UnboundVF(t *testing.T) {
	unbound := vfioVF
	unbound.driver, unbound.netdev = "", ""
	r := newVfioRig(t, unbound)
	before := r.vf(t, unbound.addr)
	pd, err := r.m.Setup(t.Context(), before, &devicev1.DeviceConfig{Vfio: new(true)}, "")
	if err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "Setup's writes", []string{
		"bus/pci/devices/0000:03:02.0/driver_override vfio-pci\n",
		"bus/pci/drivers_probe 0000:03:02.0",
	}, r.k.takeWrites())
	if diff := cmp.Diff(&devicev1.VfioBinding{}, pd.GetVfioBinding(), protocmp.Transform()); diff != "" {
		t.Errorf("vfio binding (-want +got):\n%s", diff)
	}
	if err := r.m.Free(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "Free's writes", []string{
		"bus/pci/devices/0000:03:02.0/driver_override \n",
		"bus/pci/drivers/vfio-pci/unbind 0000:03:02.0",
	}, r.k.takeWrites())
	diffStrings(t, "Free's netdev calls", nil, r.nd.takeCalls())
	if diff := cmp.Diff(before, r.vf(t, unbound.addr), protocmp.Transform()); diff != "" {
		t.Errorf("VF after Free (-before Setup +after Free):\n%s", diff)
	}
}

// A vfio_binding comes back from a claim's status: one that names no
// driver or netdev a VF can have had is refused before anything changes.
func TestVfio_FreeRefusesBadBinding(t *testing.T) {
	r := newVfioRig(t, vfioVF)
	pd, err := r.m.Setup(t.Context(), r.vf(t, vfioVF.addr), &devicev1.DeviceConfig{Vfio: new(true)}, "")
	if err != nil {
		t.Fatal(err)
	}
	r.k.takeWrites()
	for _, tc := range []struct {
		name  string
		bad   func(b *devicev1.VfioBinding)
		field string
	}{
		{"a driver path", func(b *devicev1.VfioBinding) { b.OriginalDriver = "../../../../module/x" }, "vfioBinding.originalDriver"},
		{"vfio-pci", func(b *devicev1.VfioBinding) { b.OriginalDriver = VfioDriver }, "vfioBinding.originalDriver"},
		{"a netdev name", func(b *devicev1.VfioBinding) { b.OriginalNetdev.Name = "a/b" }, "vfioBinding.originalNetdev.name"},
		{"a MAC", func(b *devicev1.VfioBinding) { b.OriginalNetdev.MacAddress = "nope" }, "vfioBinding.originalNetdev.macAddress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := proto.CloneOf(pd)
			tc.bad(bad.VfioBinding)
			err := r.m.Free(t.Context(), bad)
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Free = %v, want an error naming %s", err, tc.field)
			}
			diffStrings(t, "writes", nil, r.k.takeWrites())
		})
	}
}

// A netdev the driver does not make in time, or that cannot be given its
// identity, is an error of Free naming the device.
func TestVfio_FreeNetdevFails(t *testing.T) {
	errRename := errors.New("renaming: file exists")
	for _, tc := range []struct {
		name    string
		break_  func(r *vfioRig)
		wantErr error
	}{
		{name: "no netdev", break_: func(r *vfioRig) { r.k.netdev = "" }, wantErr: ErrBindTimeout},
		{name: "the rename fails", break_: func(r *vfioRig) { r.nd.err = errRename }, wantErr: errRename},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newVfioRig(t, vfioVF)
			pd, err := r.m.Setup(t.Context(), r.vf(t, vfioVF.addr), &devicev1.DeviceConfig{Vfio: new(true)}, "")
			if err != nil {
				t.Fatal(err)
			}
			tc.break_(r)
			err = r.m.Free(t.Context(), pd)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), pd.GetDevice().GetName()) {
				t.Fatalf("Free = %v, want %v naming the device", err, tc.wantErr)
			}
			t.Log(err)
			if d := r.vf(t, vfioVF.addr).GetDriver(); d != "iavf" {
				t.Errorf("VF on %q after Free, want iavf", d)
			}
		})
	}
}

// After a Free that could not restore the netdev, the next Free finishes
// it and changes nothing else.
func TestVfio_FreeAgainAfterNetdevFailure(t *testing.T) {
	r := newVfioRig(t, vfioVF)
	before := r.vf(t, vfioVF.addr)
	pd, err := r.m.Setup(t.Context(), before, &devicev1.DeviceConfig{Vfio: new(true)}, "")
	if err != nil {
		t.Fatal(err)
	}
	r.nd.err = errors.New("renaming: file exists")
	if err := r.m.Free(t.Context(), pd); err == nil {
		t.Fatal("Free with a failing rename succeeded")
	}
	r.nd.err = nil
	r.k.takeWrites()
	r.nd.takeCalls()
	if err := r.m.Free(t.Context(), pd); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "second Free's writes", nil, r.k.takeWrites())
	diffStrings(t, "second Free's netdev calls", []string{"eth7 -> ens1f0v0 02:00:00:03:02:00 mtu 1500 up true"}, r.nd.takeCalls())
	if diff := cmp.Diff(before, r.vf(t, vfioVF.addr), protocmp.Transform()); diff != "" {
		t.Errorf("VF after Free (-before Setup +after Free):\n%s", diff)
	}
}
