//go:build !kernelrig

package link

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
)

// networkCfg sets everything a claim sets around its interface but the VRF
// (the host kernel has no vrf module).
func networkCfg() *devicev1.DeviceConfig {
	return &devicev1.DeviceConfig{
		PodIfName: "net1",
		Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
		Routes: []*devicev1.Route{
			{Destination: "0.0.0.0/0", Gateway: "192.0.2.1", Table: 100, Metric: 10, Source: "192.0.2.10"},
			{Destination: "::/0", Gateway: "2001:db8::1", Table: 100},
			{Destination: "2001:db8:5::/48", Gateway: "2001:db8::1", Metric: 5, Scope: devicev1.RouteScope_ROUTE_SCOPE_UNIVERSE},
			{Destination: "203.0.113.0/24", Gateway: "10.99.0.1", Onlink: true},
			{Destination: "198.51.100.0/24", Scope: devicev1.RouteScope_ROUTE_SCOPE_LINK},
		},
		Rules: []*devicev1.Rule{
			{Priority: 100, From: "192.0.2.0/24", Table: 100},
			{Priority: 101, Table: 100, Fwmark: u32p(7), Fwmask: u32p(0xff)}, // both families
			{Priority: 102, Iif: "net1", To: "2001:db8:7::/48", Table: 100},
			{Priority: 103, Oif: "net1", From: "192.0.2.10/32", Table: 100},
		},
		Neighbors: []*devicev1.Neighbor{
			{Address: "192.0.2.1", Mac: "02:00:00:00:00:99"},
			{Address: "2001:db8::1", Mac: "02:00:00:00:00:98"},
		},
		LinkSettings: &devicev1.LinkSettings{
			Txqueuelen: u32p(5000), GsoMaxSize: u32p(32000), GroMaxSize: u32p(32000),
			Sysctls:  map[string]int32{"ipv4.rp_filter": 1, "ipv4.arp_ignore": 1, "ipv4.arp_announce": 2, "ipv6.accept_ra": 0, "ipv6.forwarding": 1},
			Features: map[string]bool{"rx-checksum": false, "tx-scatter-gather": false},
		},
	}
}

// netView is what a test compares of a namespace's network around a
// link: the link's settings, its sysctls, its features, and every rule,
// route and permanent neighbour of the namespace.
type netView struct {
	Settings  string
	Sysctls   map[string]string
	Features  map[string]bool
	Rules     []string
	Routes    []string
	Neighbors []string
}

var probeSysctls = []string{"ipv4.rp_filter", "ipv4.arp_ignore", "ipv4.arp_announce", "ipv6.accept_ra", "ipv6.forwarding"}

func netViewOf(t *testing.T, path string, h *netlink.Handle, name string) netView {
	t.Helper()
	var v netView
	if l, err := h.LinkByName(name); err == nil {
		a := l.Attrs()
		v.Settings = fmt.Sprintf("txqlen %d gso %d gro %d gso4 %d gro4 %d", a.TxQLen, a.GSOMaxSize, a.GROMaxSize, a.GSOIPv4MaxSize, a.GROIPv4MaxSize)
		v.Sysctls = map[string]string{}
		netnstest.Do(t, path, func() {
			for _, k := range probeSysctls {
				fam, key, _ := strings.Cut(k, ".")
				b, err := os.ReadFile(filepath.Join("/proc/sys/net", fam, "conf", name, key))
				if err != nil {
					t.Fatal(err)
				}
				v.Sysctls[k] = strings.TrimSpace(string(b))
			}
		})
		v.Features = featuresOf(t, path, a.Index, "rx-checksum", "tx-scatter-gather")
	}
	for _, r := range retryDump(t, func() ([]netlink.Rule, error) { return h.RuleList(netlink.FAMILY_ALL) }) {
		v.Rules = append(v.Rules, ruleString(r))
	}
	for _, r := range retryDump(t, func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	}) {
		if r.Protocol == unix.RTPROT_STATIC {
			v.Routes = append(v.Routes, fmt.Sprintf("%s via %s table %d metric %d src %s scope %d", r.Dst, r.Gw, r.Table, r.Priority, r.Src, r.Scope))
		}
	}
	for _, n := range retryDump(t, func() ([]netlink.Neigh, error) { return h.NeighList(0, netlink.FAMILY_ALL) }) {
		if n.State&netlink.NUD_PERMANENT != 0 {
			v.Neighbors = append(v.Neighbors, fmt.Sprintf("%s %s %d", n.IP, n.HardwareAddr, n.LinkIndex))
		}
	}
	slices.Sort(v.Rules)
	slices.Sort(v.Routes)
	slices.Sort(v.Neighbors)
	return v
}

// ruleString is r as a test compares it: netlink.Rule's String and the
// matches it leaves out (iif, oif, fwmark).
func ruleString(r netlink.Rule) string {
	mask := "none"
	if r.Mask != nil {
		mask = fmt.Sprintf("%#x", *r.Mask)
	}
	return fmt.Sprintf("%s iif %q oif %q fwmark %d/%s", r, r.IifName, r.OifName, r.Mark, mask)
}

func featuresOf(t *testing.T, path string, index int, names ...string) map[string]bool {
	t.Helper()
	ns, err := netlinkns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(testLogger(t), path, ns, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := c.ethtool()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fs, err := e.features(index)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range names {
		got[n] = fs.active[n]
	}
	return got
}

// writeSysctl sets a sysctl of the link name in the namespace at path.
func writeSysctl(t *testing.T, path, name, key, value string) {
	t.Helper()
	netnstest.Do(t, path, func() {
		fam, k, _ := strings.Cut(key, ".")
		if err := os.WriteFile(filepath.Join("/proc/sys/net", fam, "conf", name, k), []byte(value), 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMover_NetworkAttachDetach applies every setting but the VRF to a
// moved link and checks that Detach leaves the pod's and the host's
// network as they were before Attach: the rules gone from the pod (which
// lives on), the routes and neighbours with the link, and the link's
// settings, sysctls and features back to the host's, the sysctls being
// ones the host had changed from its defaults. The Detach runs on a new
// Mover, with the originals only from the snapshot Setup would keep, as
// after a provisioner restart.
func TestMover_NetworkAttachDetach(t *testing.T) {
	r, _, orig := rigWithDevice(t)
	writeSysctl(t, r.hostPath, "ndv0", "ipv4.rp_filter", "2")
	writeSysctl(t, r.hostPath, "ndv0", "ipv6.accept_ra", "2")
	cfg := networkCfg()
	settings, err := r.mover.ReadSettings(t.Context(), "ndv0", cfg.GetLinkSettings())
	if err != nil {
		t.Fatal(err)
	}
	orig.Settings = settings
	hostBefore, podBefore := netViewOf(t, r.hostPath, r.host, "ndv0"), netViewOf(t, r.podPath, r.pod, "net1")

	if err := r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	in := netViewOf(t, r.podPath, r.pod, "net1")
	wantSysctls := map[string]string{"ipv4.rp_filter": "1", "ipv4.arp_ignore": "1", "ipv4.arp_announce": "2", "ipv6.accept_ra": "0", "ipv6.forwarding": "1"}
	if diff := cmp.Diff(wantSysctls, in.Sysctls); diff != "" {
		t.Errorf("sysctls in the pod (-want +got):\n%s", diff)
	}
	if want := "txqlen 5000 gso 32000 gro 32000"; !strings.HasPrefix(in.Settings, want+" ") {
		t.Errorf("settings in the pod = %q, want %q", in.Settings, want)
	}
	if diff := cmp.Diff(map[string]bool{"rx-checksum": false, "tx-scatter-gather": false}, in.Features); diff != "" {
		t.Errorf("features in the pod (-want +got):\n%s", diff)
	}
	if got := len(in.Rules) - len(podBefore.Rules); got != 5 {
		t.Errorf("the pod has %d rules more, want 5:\n%s", got, strings.Join(in.Rules, "\n"))
	}
	for _, want := range [][2]string{
		{"ip rule 102: from all to 2001:db8:7::/48 table 100 ", `iif "net1" oif ""`},
		{"ip rule 103: from 192.0.2.10/32 to all table 100 ", `iif "" oif "net1"`},
	} {
		if !slices.ContainsFunc(in.Rules, func(r string) bool { return strings.HasPrefix(r, want[0]) && strings.Contains(r, want[1]) }) {
			t.Errorf("no rule %q with %s in the pod:\n%s", want[0], want[1], strings.Join(in.Rules, "\n"))
		}
	}
	for _, want := range []string{
		"0.0.0.0/0 via 192.0.2.1 table 100 metric 10 src 192.0.2.10 scope 0",
		"::/0 via 2001:db8::1 table 100 metric 1024 src <nil> scope 0",
		"2001:db8:5::/48 via 2001:db8::1 table 254 metric 5 src <nil> scope 0",
		"203.0.113.0/24 via 10.99.0.1 table 254 metric 0 src <nil> scope 0",
		"198.51.100.0/24 via <nil> table 254 metric 0 src <nil> scope 253",
	} {
		if !slices.Contains(in.Routes, want) {
			t.Errorf("no route %q in the pod:\n%s", want, strings.Join(in.Routes, "\n"))
		}
	}
	if len(in.Neighbors) != 2 {
		t.Errorf("permanent neighbours in the pod: %v, want 2", in.Neighbors)
	}
	// Attach again is a no-op.
	if err := r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg); err != nil {
		t.Fatalf("Attach again: %v", err)
	}

	restarted, err := NewMover(testLogger(t), WithHostNetns(r.hostPath))
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	if err := restarted.Detach(t.Context(), orig, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hostBefore, netViewOf(t, r.hostPath, r.host, "ndv0")); diff != "" {
		t.Errorf("the host after Detach (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(podBefore, netViewOf(t, r.podPath, r.pod, "net1")); diff != "" {
		t.Errorf("the pod after Detach (-before +after):\n%s", diff)
	}
	if err := restarted.Detach(t.Context(), orig, r.podPath, cfg); err != nil {
		t.Fatalf("Detach again: %v", err)
	}
}

// TestMover_BigTCPIPv4 applies the IPv4 GSO/GRO max sizes (Big TCP over
// IPv4) to a moved link and checks the kernel's values in the pod and,
// after Detach, the host's values from before: Big TCP sizes for both
// families; and an IPv4 size equal to the link's with a smaller GSO/GRO
// max size, which the kernel also lowers the IPv4 size to. On a kernel
// without the attributes (before Linux 6.3, which reports none for the
// host's link) Attach must refuse them naming the field.
func TestMover_BigTCPIPv4(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hostBig  bool // the host link's GSO/GRO max sizes Big TCP's before, its IPv4 ones not
		settings func(gso4, gro4 uint32) *devicev1.LinkSettings
		want     string // in the pod, with the link's IPv4 sizes from before as %d %d
	}{
		{"big tcp", false, func(uint32, uint32) *devicev1.LinkSettings {
			return &devicev1.LinkSettings{GsoMaxSize: u32p(150000), GroMaxSize: u32p(150000), GsoIpv4MaxSize: u32p(150000), GroIpv4MaxSize: u32p(150000)}
		}, "gso 150000 gro 150000 gso4 150000 gro4 150000"},
		{"ipv4 kept at the link's", false, func(gso4, gro4 uint32) *devicev1.LinkSettings {
			return &devicev1.LinkSettings{GsoMaxSize: u32p(32000), GroMaxSize: u32p(32000), GsoIpv4MaxSize: u32p(gso4), GroIpv4MaxSize: u32p(gro4)}
		}, "gso 32000 gro 32000 gso4 %d gro4 %d"},
		{"ipv4 lowered by the others from a big tcp host", true, func(uint32, uint32) *devicev1.LinkSettings {
			return &devicev1.LinkSettings{GsoMaxSize: u32p(32000), GroMaxSize: u32p(32000)}
		}, "gso 32000 gro 32000 gso4 32000 gro4 32000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, orig := rigWithDevice(t)
			l, err := r.host.LinkByName("ndv0")
			if err != nil {
				t.Fatal(err)
			}
			gso4, gro4 := l.Attrs().GSOIPv4MaxSize, l.Attrs().GROIPv4MaxSize
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", LinkSettings: tc.settings(gso4, gro4)}
			if (gso4 == 0 || gro4 == 0) && cfg.LinkSettings.GsoIpv4MaxSize == nil {
				t.Skipf("kernel %s reports no IPv4 GSO/GRO max size", kernelRelease(t))
			}
			if tc.hostBig {
				if err := r.host.LinkSetGSOMaxSize(l, 150000); err != nil {
					t.Fatal(err)
				}
				if err := r.host.LinkSetGROMaxSize(l, 150000); err != nil {
					t.Fatal(err)
				}
			}
			if orig.Settings, err = r.mover.ReadSettings(t.Context(), "ndv0", cfg.GetLinkSettings()); err != nil {
				t.Fatal(err)
			}
			hostBefore, podBefore := netViewOf(t, r.hostPath, r.host, "ndv0"), netViewOf(t, r.podPath, r.pod, "net1")
			err = r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg)
			if gso4 == 0 || gro4 == 0 {
				var fe *fielderr.Error
				if !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, "IPv4MaxSize") {
					t.Fatalf("kernel %s reports no IPv4 GSO/GRO max size (gso %d gro %d); Attach error = %v, want a field error naming it", kernelRelease(t), gso4, gro4, err)
				}
				if diff := cmp.Diff(podBefore, netViewOf(t, r.podPath, r.pod, "net1")); diff != "" {
					t.Errorf("the pod after a refused Attach (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, gso4, gro4)
			}
			if got := netViewOf(t, r.podPath, r.pod, "net1").Settings; !strings.HasSuffix(got, " "+want) {
				t.Errorf("settings in the pod = %q, want %q", got, want)
			}
			if err := r.mover.Detach(t.Context(), orig, r.podPath, cfg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(hostBefore, netViewOf(t, r.hostPath, r.host, "ndv0")); diff != "" {
				t.Errorf("the host after Detach (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(podBefore, netViewOf(t, r.podPath, r.pod, "net1")); diff != "" {
				t.Errorf("the pod after Detach (-before +after):\n%s", diff)
			}
		})
	}
}

// TestMover_NetworkRefused checks that what the kernel refuses fails
// Attach naming the field, and leaves the host and the pod as they were:
// the settings applied before it set back, the link in the host.
func TestMover_NetworkRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(*devicev1.DeviceConfig)
		wantField string
		wantIn    string
	}{
		{"fixed feature", func(c *devicev1.DeviceConfig) { c.LinkSettings.Features["loopback"] = true }, "features", "loopback"},
		{"unknown private flag", func(c *devicev1.DeviceConfig) { c.LinkSettings.PrivateFlags = map[string]bool{"legacy-rx": true} }, "privateFlags", "legacy-rx"},
		{"gso above the device's", func(c *devicev1.DeviceConfig) { c.LinkSettings.GsoMaxSize = u32p(maxGSO + 1) }, "gsoMaxSize", ""},
		{"route through a gateway off the link", func(c *devicev1.DeviceConfig) {
			c.Routes = append(c.Routes, &devicev1.Route{Destination: "10.123.0.0/16", Gateway: "10.77.0.1"})
		}, "routes[5]", "10.77.0.1"},
		{"ipv6 neighbour on a link without ipv6", func(c *devicev1.DeviceConfig) {
			c.LinkSettings.Sysctls["ipv6.disable_ipv6"] = 1
			c.Addresses = c.Addresses[:1]
			c.Routes = []*devicev1.Route{c.Routes[0], c.Routes[3], c.Routes[4]}
		}, "neighbors[1]", "2001:db8::1"},
		{"vrf on a kernel without VRF devices", func(c *devicev1.DeviceConfig) { c.Vrf = &devicev1.Vrf{Name: "red", Table: 100} }, "vrf", "CONFIG_NET_VRF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantField == "vrf" && kernelMakesVRF(t) {
				t.Skip("this kernel makes VRF devices (TestKernel_VRF covers them)")
			}
			r, _, orig := rigWithDevice(t)
			writeSysctl(t, r.hostPath, "ndv0", "ipv4.rp_filter", "2")
			cfg := networkCfg()
			tc.edit(cfg)
			settings, err := r.mover.ReadSettings(t.Context(), "ndv0", cfg.GetLinkSettings())
			if err != nil && !errors.Is(err, fielderr.ErrInvalid) {
				t.Fatal(err)
			}
			orig.Settings = settings
			hostBefore, podBefore := netViewOf(t, r.hostPath, r.host, "ndv0"), netViewOf(t, r.podPath, r.pod, "net1")
			err = r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg)
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tc.wantField || !strings.Contains(fe.Reason, tc.wantIn) {
				t.Fatalf("Attach error = %v, want a field error for %s naming %q", err, tc.wantField, tc.wantIn)
			}
			if diff := cmp.Diff(hostBefore, netViewOf(t, r.hostPath, r.host, "ndv0")); diff != "" {
				t.Errorf("the host after a refused Attach (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(podBefore, netViewOf(t, r.podPath, r.pod, "net1")); diff != "" {
				t.Errorf("the pod after a refused Attach (-before +after):\n%s", diff)
			}
		})
	}
}

// kernelMakesVRF reports whether the kernel makes a VRF device (one
// added in a throwaway namespace).
func kernelMakesVRF(t *testing.T) bool {
	t.Helper()
	h := netnstest.Handle(t, netnstest.New(t))
	return h.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: "probe"}, Table: 1}) == nil
}

// maxGSO is above what a veth takes (its tso_max_size).
const maxGSO = 524280
