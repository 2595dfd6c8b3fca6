//go:build kernelrig

// The rig's self-test: checks, inside the guest, every kernel feature the
// rig promises, the way netdra's own kernel-rig tests use them.
package kernelrig_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/kernelrig"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// delLink deletes the link name, if it (still) exists in the root netns.
func delLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

func eq[V comparable](t *testing.T, what string, got, want V) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestModulesLoaded(t *testing.T) {
	kernelrig.Require(t)
	for _, m := range []string{"llc", "stp", "garp", "mrp", "8021q", "dummy", "veth", "vrf", "psample", "netdevsim",
		"igb", "igbvf", "vfio", "vfio_iommu_type1", "vfio_pci"} {
		t.Run(m, func(t *testing.T) {
			if _, err := os.Stat("/sys/module/" + m); err != nil {
				t.Fatalf("module %s is not loaded: %v", m, err)
			}
		})
	}
}

func TestDummyVLAN(t *testing.T) {
	kernelrig.Require(t)
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "krdum0"}}); err != nil {
		t.Fatalf("add dummy: %v", err)
	}
	t.Cleanup(func() { delLink("krdum0") })
	dum, err := netlink.LinkByName("krdum0")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "dummy type", dum.Type(), "dummy")
	if err := netlink.LinkSetUp(dum); err != nil {
		t.Fatalf("dummy up: %v", err)
	}

	for _, tc := range []struct {
		name  string
		id    int
		proto netlink.VlanProtocol
	}{
		{name: "802.1q id 100", id: 100, proto: netlink.VLAN_PROTOCOL_8021Q},
		{name: "802.1ad id 200", id: 200, proto: netlink.VLAN_PROTOCOL_8021AD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("krdum0.%d", tc.id)
			vl := &netlink.Vlan{
				LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: dum.Attrs().Index},
				VlanId:    tc.id, VlanProtocol: tc.proto,
			}
			if err := netlink.LinkAdd(vl); err != nil {
				t.Fatalf("add vlan: %v", err)
			}
			l, err := netlink.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := l.(*netlink.Vlan)
			if !ok {
				t.Fatalf("%s is a %T (%s), not a *netlink.Vlan", name, l, l.Type())
			}
			eq(t, "vlan id", got.VlanId, tc.id)
			eq(t, "vlan protocol", got.VlanProtocol, tc.proto)
			eq(t, "vlan parent", got.ParentIndex, dum.Attrs().Index)
			if err := netlink.LinkSetUp(got); err != nil {
				t.Fatalf("vlan up: %v", err)
			}
			if l, err = netlink.LinkByName(name); err != nil {
				t.Fatal(err)
			}
			eq(t, "vlan up", l.Attrs().Flags&net.FlagUp != 0, true)
		})
	}
}

const nsimBus = "/sys/bus/netdevsim"

// newNetdevsim creates netdevsim device id with one port and numVFs SR-IOV
// VFs and returns its PF link.
func newNetdevsim(t *testing.T, id, numVFs int) netlink.Link {
	t.Helper()
	if err := os.WriteFile(nsimBus+"/new_device", []byte(fmt.Sprintf("%d 1", id)), 0); err != nil {
		t.Fatalf("netdevsim new_device: %v", err)
	}
	t.Cleanup(func() { _ = os.WriteFile(nsimBus+"/del_device", []byte(fmt.Sprint(id)), 0) })
	dev := fmt.Sprintf("%s/devices/netdevsim%d", nsimBus, id)
	// At most 4 VFs unless debugfs max_vfs is raised; changing the count
	// from N to M needs 0 in between.
	if err := os.WriteFile(dev+"/sriov_numvfs", []byte(fmt.Sprint(numVFs)), 0); err != nil {
		t.Fatalf("sriov_numvfs: %v", err)
	}
	var names []string
	for deadline := time.Now().Add(5 * time.Second); len(names) == 0 && time.Now().Before(deadline); {
		names, _ = filepath.Glob(dev + "/net/*")
		if len(names) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(names) != 1 {
		t.Fatalf("want 1 PF netdev under %s/net, got %v", dev, names)
	}
	pf, err := netlink.LinkByName(filepath.Base(names[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

func TestNetdevsimVFs(t *testing.T) {
	kernelrig.Require(t)
	const numVFs = 4
	pf := newNetdevsim(t, 1, numVFs)
	t.Logf("netdevsim PF: %s", pf.Attrs().Name)
	b, err := os.ReadFile(nsimBus + "/devices/netdevsim1/sriov_numvfs")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "sriov_numvfs", strings.TrimSpace(string(b)), fmt.Sprint(numVFs))
	eq(t, "VFs reported by the PF", len(pf.Attrs().Vfs), numVFs)

	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x01, 0x01}
	for _, tc := range []struct {
		name    string
		vf      int
		set     func(l netlink.Link, vf int) error
		wantErr bool
		check   func(t *testing.T, vf netlink.VfInfo)
	}{
		{
			name: "mac", vf: 0,
			set:   func(l netlink.Link, vf int) error { return netlink.LinkSetVfHardwareAddr(l, vf, mac) },
			check: func(t *testing.T, vf netlink.VfInfo) { eq(t, "mac", vf.Mac.String(), mac.String()) },
		},
		{
			name: "vlan and qos", vf: 1,
			set: func(l netlink.Link, vf int) error { return netlink.LinkSetVfVlanQos(l, vf, 100, 5) },
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "vlan", vf.Vlan, 100)
				eq(t, "qos", vf.Qos, 5)
				eq(t, "vlan proto", vf.VlanProto, unix.ETH_P_8021Q)
			},
		},
		{
			name: "vlan proto 802.1ad", vf: 2,
			set: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfVlanQosProto(l, vf, 300, 3, unix.ETH_P_8021AD)
			},
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "vlan", vf.Vlan, 300)
				eq(t, "qos", vf.Qos, 3)
				eq(t, "vlan proto", vf.VlanProto, unix.ETH_P_8021AD)
			},
		},
		{
			name: "spoofchk on", vf: 3,
			set:   func(l netlink.Link, vf int) error { return netlink.LinkSetVfSpoofchk(l, vf, true) },
			check: func(t *testing.T, vf netlink.VfInfo) { eq(t, "spoofchk", vf.Spoofchk, true) },
		},
		{
			name: "spoofchk off", vf: 3,
			set:   func(l netlink.Link, vf int) error { return netlink.LinkSetVfSpoofchk(l, vf, false) },
			check: func(t *testing.T, vf netlink.VfInfo) { eq(t, "spoofchk", vf.Spoofchk, false) },
		},
		{
			name: "trust on", vf: 0,
			set:   func(l netlink.Link, vf int) error { return netlink.LinkSetVfTrust(l, vf, true) },
			check: func(t *testing.T, vf netlink.VfInfo) { eq(t, "trust", vf.Trust, 1) },
		},
		{
			name: "trust off", vf: 0,
			set:   func(l netlink.Link, vf int) error { return netlink.LinkSetVfTrust(l, vf, false) },
			check: func(t *testing.T, vf netlink.VfInfo) { eq(t, "trust", vf.Trust, 0) },
		},
		{
			name: "link state disable", vf: 1,
			set: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfState(l, vf, netlink.VF_LINK_STATE_DISABLE)
			},
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "link state", vf.LinkState, uint32(netlink.VF_LINK_STATE_DISABLE))
			},
		},
		{
			name: "link state enable", vf: 1,
			set: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfState(l, vf, netlink.VF_LINK_STATE_ENABLE)
			},
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "link state", vf.LinkState, uint32(netlink.VF_LINK_STATE_ENABLE))
			},
		},
		{
			name: "link state auto", vf: 1,
			set: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfState(l, vf, netlink.VF_LINK_STATE_AUTO)
			},
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "link state", vf.LinkState, uint32(netlink.VF_LINK_STATE_AUTO))
			},
		},
		{
			name: "min and max tx rate", vf: 2,
			set: func(l netlink.Link, vf int) error { return netlink.LinkSetVfRate(l, vf, 100, 1000) },
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "min tx rate", vf.MinTxRate, 100)
				eq(t, "max tx rate", vf.MaxTxRate, 1000)
				eq(t, "legacy tx rate (= max)", vf.TxRate, 1000)
			},
		},
		{
			name: "legacy tx rate sets max, keeps min", vf: 2,
			set: func(l netlink.Link, vf int) error { return netlink.LinkSetVfTxRate(l, vf, 777) },
			check: func(t *testing.T, vf netlink.VfInfo) {
				eq(t, "min tx rate", vf.MinTxRate, 100)
				eq(t, "max tx rate", vf.MaxTxRate, 777)
			},
		},
		{
			name: "vf out of range rejected", vf: numVFs, wantErr: true,
			set: func(l netlink.Link, vf int) error { return netlink.LinkSetVfHardwareAddr(l, vf, mac) },
		},
		{
			name: "multicast mac rejected", vf: 0, wantErr: true,
			set: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfHardwareAddr(l, vf, net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1})
			},
		},
		{
			name: "qos above 7 rejected", vf: 1, wantErr: true,
			set: func(l netlink.Link, vf int) error { return netlink.LinkSetVfVlanQos(l, vf, 100, 8) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.set(pf, tc.vf)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("VF %d: no error, want one", tc.vf)
				}
				return
			}
			if err != nil {
				t.Fatalf("VF %d: %v", tc.vf, err)
			}
			l, err := netlink.LinkByName(pf.Attrs().Name)
			if err != nil {
				t.Fatal(err)
			}
			vfs := l.Attrs().Vfs
			if len(vfs) != numVFs {
				t.Fatalf("PF reports %d VFs, want %d", len(vfs), numVFs)
			}
			eq(t, "vf id", vfs[tc.vf].ID, tc.vf)
			tc.check(t, vfs[tc.vf])
		})
	}
}

// newNamedNetns creates the named network namespace name (as `ip netns add`
// does, under /run/netns) and returns it and the root namespace.
func newNamedNetns(t *testing.T, name string) (ns, root netns.NsHandle) {
	t.Helper()
	// netns.NewNamed switches the calling thread into the new namespace:
	// lock it and switch back. If something fails the thread stays locked
	// and dies with the goroutine instead of going back to the pool.
	runtime.LockOSThread()
	root, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err = netns.NewNamed(name)
	if err != nil {
		t.Fatalf("netns.NewNamed: %v", err)
	}
	if err := netns.Set(root); err != nil {
		t.Fatalf("back to the root netns: %v", err)
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() {
		ns.Close()
		root.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("netns.DeleteNamed: %v", err)
		}
	})
	return ns, root
}

func TestVethNamedNetns(t *testing.T) {
	kernelrig.Require(t)
	ns, root := newNamedNetns(t, "krtest")
	byName, err := netns.GetFromName("krtest")
	if err != nil {
		t.Fatalf("netns.GetFromName: %v", err)
	}
	byName.Close()
	// Only NETLINK_ROUTE: without a family list NewHandleAt also opens xfrm
	// and netfilter sockets, which fail when those modules are not loaded.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("NewHandleAt: %v", err)
	}
	t.Cleanup(h.Close)

	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "krveth0"}, PeerName: "krveth1"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	t.Cleanup(func() { delLink("krveth0") })

	notFound := func(err error) bool {
		var nf netlink.LinkNotFoundError
		return errors.As(err, &nf)
	}
	// Each step needs the previous ones: stop at the first failure.
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"move peer into named netns", func(t *testing.T) {
			peer, err := netlink.LinkByName("krveth1")
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
				t.Fatalf("LinkSetNsFd: %v", err)
			}
			if _, err := netlink.LinkByName("krveth1"); !notFound(err) {
				t.Errorf("krveth1 still in the root netns (err %v)", err)
			}
			l, err := h.LinkByName("krveth1")
			if err != nil {
				t.Fatalf("krveth1 not in the netns: %v", err)
			}
			eq(t, "type", l.Type(), "veth")
		}},
		{"rename then up in netns", func(t *testing.T) {
			// Rename before up: renaming an up link fails with EBUSY.
			l, err := h.LinkByName("krveth1")
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetName(l, "krpeer"); err != nil {
				t.Fatalf("rename: %v", err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatalf("up: %v", err)
			}
			if err := h.LinkSetName(l, "krpeer2"); !errors.Is(err, unix.EBUSY) {
				t.Errorf("renaming an up link: err %v, want EBUSY", err)
			}
			addr, _ := netlink.ParseAddr("192.0.2.2/24")
			if err := h.AddrAdd(l, addr); err != nil {
				t.Fatalf("addr add: %v", err)
			}
			addrs, err := h.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "addresses in netns", len(addrs), 1)
		}},
		{"carrier across namespaces", func(t *testing.T) {
			l, err := netlink.LinkByName("krveth0")
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatalf("up krveth0: %v", err)
			}
			l, err = h.LinkByName("krpeer")
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "peer lower up", l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0, true)
		}},
		{"move back to root netns", func(t *testing.T) {
			l, err := h.LinkByName("krpeer")
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetNsFd(l, int(root)); err != nil {
				t.Fatalf("LinkSetNsFd: %v", err)
			}
			if _, err := h.LinkByName("krpeer"); !notFound(err) {
				t.Errorf("krpeer still in the netns (err %v)", err)
			}
			back, err := netlink.LinkByName("krpeer")
			if err != nil {
				t.Fatalf("krpeer not back in the root netns: %v", err)
			}
			eq(t, "type", back.Type(), "veth")
		}},
	} {
		if !t.Run(step.name, step.run) {
			break
		}
	}
}
