package subif

import (
	"fmt"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// scanner builds the inventory from the host's links. It remembers which
// entries it withheld, to log a change once.
type scanner struct {
	m        *Manager
	withheld map[string]bool // offer name -> withheld as the uplink
}

// parentState is the health of a sub-interface whose parent is l: the
// parent's, except that an administratively down parent is down for its
// sub-interfaces (they carry nothing), and a missing one too.
func parentState(l netlink.Link) devicev1.LinkState {
	if l == nil {
		return devicev1.LinkState_LINK_STATE_DOWN
	}
	if s := hostdev.LinkState(l.Attrs()); s != devicev1.LinkState_LINK_STATE_ADMIN_DOWN {
		return s
	}
	return devicev1.LinkState_LINK_STATE_DOWN
}

// scan returns every offered device, in configuration order, each entry's
// in index order. An entry whose parent is missing is still offered, its
// devices down (Setup refuses them until the parent is back); one whose
// parent a default route goes through is not offered unless it allows it.
func (s *scanner) scan() ([]*devicev1.Device, error) {
	h, err := s.m.ns.Dial()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := netlinkns.RetryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	up, err := hostdev.Uplinks(h, links)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]netlink.Link, len(links))
	for _, l := range links {
		byName[l.Attrs().Name] = l
	}
	devs := []*devicev1.Device{}
	for i := range s.m.offers {
		o := &s.m.offers[i]
		p := byName[o.sub.GetParentIfName()]
		if !s.offered(o, p, up) {
			continue
		}
		var mtu uint32
		if p != nil {
			mtu = uint32(p.Attrs().MTU)
		}
		for j := range o.devices() {
			devs = append(devs, o.device(j, mtu, parentState(p)))
		}
	}
	return devs, nil
}

// offered reports whether o's devices are offered with parent p (nil:
// missing): not when a default route of the host goes through p, unless o
// allows it. A change is logged once.
func (s *scanner) offered(o *offer, p netlink.Link, up map[int]bool) bool {
	withhold := p != nil && up[p.Attrs().Index] && !o.allowDefaultRoute
	if withhold != s.withheld[o.name] {
		if withhold {
			s.m.log.Warn("not offering sub-interfaces: a default route of the host goes through their parent (set allowDefaultRoute to offer them)",
				"name", o.name, "parent", o.sub.GetParentIfName())
		} else {
			s.m.log.Info("offering sub-interfaces again", "name", o.name, "parent", o.sub.GetParentIfName())
		}
		s.withheld[o.name] = withhold
	}
	return !withhold
}
