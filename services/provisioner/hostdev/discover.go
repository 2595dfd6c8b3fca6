package hostdev

import (
	"cmp"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// describe returns l as a host device, with what sysfs adds, if the
// configuration selects it (it may still hold a default route), or nil.
// The loopback is never selected.
func (m *Manager) describe(l netlink.Link) *devicev1.Device {
	a := l.Attrs()
	if a.Flags&net.FlagLoopback != 0 || !m.sel.matchName(a.Name) {
		return nil
	}
	hw := readHW(m.sysfsRoot, a.Name, a.Index)
	d := &devicev1.Device{
		Name:         deviceName(a.Name),
		Manager:      devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		KernelIfName: a.Name,
		PciAddress:   hw.pci,
		VendorId:     hw.vendor,
		DeviceId:     hw.device,
		Driver:       cmp.Or(hw.driver, linkKind(l)),
		NumaNode:     hw.numa,
		PcieRoot:     hw.pcieRoot,
		MacAddress:   a.HardwareAddr.String(),
		Mtu:          uint32(a.MTU),
		LinkState:    linkState(a),
		RdmaDevice:   hw.rdma,
	}
	if !m.sel.matchDevice(d) {
		return nil
	}
	return d
}

// linkKind is the driver of a virtual link, which has no device in sysfs:
// its rtnetlink kind (veth, macvlan, vxlan, ...), the name its driver
// registers. A physical link with no sysfs entry has none.
func linkKind(l netlink.Link) string {
	if t := l.Type(); t != "device" {
		return t
	}
	return ""
}

// scanner discovers the host devices, remembering between scans which
// interfaces it withheld, so that it logs each once.
type scanner struct {
	m        *Manager
	h        *netlink.Handle
	cache    *linkCache      // the links between dumps; nil: dump every scan
	withheld map[string]bool // interface names
}

// scan returns the devices the manager offers now, sorted by name. The
// links come from the cache unless fresh is set (or the cache awaits a
// dump); the default routes and sysfs are read each time.
func (s *scanner) scan(fresh bool) ([]*devicev1.Device, error) {
	dump := func() ([]netlink.Link, error) { return netlinkns.RetryDump(s.h.LinkList) }
	var links []netlink.Link
	var err error
	if s.cache != nil {
		links, err = s.cache.list(dump, fresh)
	} else {
		links, err = dump()
	}
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	up, err := uplinks(s.h, links)
	if err != nil {
		return nil, err
	}
	var devs []*devicev1.Device
	withheld := map[string]bool{}
	byName := map[string]string{} // device name -> interface name
	for _, l := range links {
		d := s.m.describe(l)
		if d == nil {
			continue
		}
		ifName := d.GetKernelIfName()
		if up[l.Attrs().Index] {
			withheld[ifName] = true
			if !s.withheld[ifName] {
				s.m.log.Info("not offering interface: a default route of the host goes through it", "interface", ifName)
			}
			continue
		}
		if other, clash := byName[d.GetName()]; clash {
			s.m.log.Warn("not offering interface: its device name is taken", "interface", ifName, "device", d.GetName(), "takenBy", other)
			continue
		}
		byName[d.GetName()] = ifName
		devs = append(devs, d)
	}
	s.withheld = withheld
	slices.SortFunc(devs, func(a, b *devicev1.Device) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return devs, nil
}

// uplinks returns the ifindexes of the links that a default route of the
// host goes through, which must stay where they are: the links that hold a
// default route (defaultRouteLinks), and, repeatedly, the ports of such a
// link when it is a bridge or bond (their master is an uplink), and the
// lower link of such a link when it is a VLAN, macvlan or ipvlan link. So
// with the default route on br0, br0's port eth0 is an uplink too.
func uplinks(h *netlink.Handle, links []netlink.Link) (map[int]bool, error) {
	up, err := defaultRouteLinks(h)
	if err != nil {
		return nil, err
	}
	for changed := true; changed; {
		changed = false
		for _, l := range links {
			a := l.Attrs()
			switch {
			case up[a.Index]:
				if p := lowerIndex(l); p > 0 && !up[p] {
					up[p], changed = true, true
				}
			case a.MasterIndex > 0 && up[a.MasterIndex]:
				up[a.Index], changed = true, true
			}
		}
	}
	return up, nil
}

// lowerIndex returns the ifindex of the link that l sends through, in the
// same namespace, for the kinds of link that have one; else 0. (A veth's
// IFLA_LINK is its peer, which does not carry its traffic out.)
func lowerIndex(l netlink.Link) int {
	a := l.Attrs()
	switch l.Type() {
	case "vlan", "macvlan", "macvtap", "ipvlan", "ipvtap":
		if a.NetNsID < 0 {
			return a.ParentIndex
		}
	}
	return 0
}

// defaultRouteLinks returns the ifindexes of the links that hold an IPv4 or
// IPv6 default route (0.0.0.0/0, ::/0) in the main table, directly or as a
// next hop of a multipath route.
func defaultRouteLinks(h *netlink.Handle) (map[int]bool, error) {
	links := map[int]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: zeroPrefix(fam)}
		routes, err := netlinkns.RetryDump(func() ([]netlink.Route, error) {
			return h.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		})
		if err != nil {
			return nil, fmt.Errorf("listing default routes: %w", err)
		}
		for _, r := range routes {
			for _, idx := range routeLinks(r) {
				links[idx] = true
			}
		}
	}
	return links, nil
}

// routeLinks returns the ifindexes a route sends through.
func routeLinks(r netlink.Route) []int {
	var idx []int
	if r.LinkIndex > 0 {
		idx = append(idx, r.LinkIndex)
	}
	for _, nh := range r.MultiPath {
		if nh != nil && nh.LinkIndex > 0 {
			idx = append(idx, nh.LinkIndex)
		}
	}
	return idx
}

// isDefaultRoute reports whether r is a default route of the main table.
func isDefaultRoute(r netlink.Route) bool {
	if r.Table != unix.RT_TABLE_MAIN {
		return false
	}
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

func zeroPrefix(family int) *net.IPNet {
	if family == netlink.FAMILY_V6 {
		return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
}
