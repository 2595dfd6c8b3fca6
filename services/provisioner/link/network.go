package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/fielderr"
)

// What a claim sets up around its interface in the pod: policy rules,
// permanent neighbours and a VRF. Routes and neighbours through the
// interface go with it when it leaves the pod (the kernel flushes them);
// rules and the VRF device stay in the pod's namespace, so Detach and
// Remove delete them (unpod): the rules the claim added, the VRF when
// netdra made it and no link of the pod is enslaved to it any more.

// VRFAlias is the interface alias that marks a VRF device netdra created
// in a pod: only such a VRF is deleted, and only once it has no slaves.
const VRFAlias = "netdra:vrf"

var routeScopes = map[devicev1.RouteScope]netlink.Scope{
	devicev1.RouteScope_ROUTE_SCOPE_UNIVERSE: netlink.SCOPE_UNIVERSE,
	devicev1.RouteScope_ROUTE_SCOPE_SITE:     netlink.SCOPE_SITE,
	devicev1.RouteScope_ROUTE_SCOPE_LINK:     netlink.SCOPE_LINK,
	devicev1.RouteScope_ROUTE_SCOPE_HOST:     netlink.SCOPE_HOST,
}

// parseRouteExtras sets route's table (with a VRF, its table for 0),
// scope, source, metric and onlink from r.
func parseRouteExtras(route *netlink.Route, r *devicev1.Route, vrf *devicev1.Vrf) {
	route.Table = int(r.GetTable())
	if route.Table == 0 && vrf != nil {
		route.Table = int(vrf.GetTable())
	}
	if s, ok := routeScopes[r.GetScope()]; ok {
		route.Scope = s
	}
	if src, err := netip.ParseAddr(r.GetSource()); err == nil {
		route.Src = net.IP(src.AsSlice())
	}
	route.Priority = int(r.GetMetric())
	if r.GetOnlink() {
		route.Flags |= int(netlink.FLAG_ONLINK)
	}
}

// podRule is a kernel rule made of the claim's rule at index in its
// rules, so that a refusal names the claim's field.
type podRule struct {
	index int
	rule  *netlink.Rule
}

// podNeighbor is a permanent neighbour made of the claim's neighbour at
// index in its neighbors.
type podNeighbor struct {
	index int
	neigh *netlink.Neigh
}

// parseRules converts the rules; one with neither from nor to is one rule
// for each family, both with its index.
func parseRules(rules []*devicev1.Rule) []podRule {
	var out []podRule
	for i, r := range rules {
		rule := netlink.NewRule()
		rule.Priority = -1
		if r.GetPriority() != 0 {
			rule.Priority = int(r.GetPriority())
		}
		rule.Table = int(r.GetTable())
		rule.IifName, rule.OifName = r.GetIif(), r.GetOif()
		if r.Fwmark != nil {
			rule.Mark = r.GetFwmark()
			if r.Fwmask != nil {
				mask := r.GetFwmask()
				rule.Mask = &mask
			}
		}
		family := 0
		if p, err := netip.ParsePrefix(r.GetFrom()); err == nil {
			rule.Src, family = ipNet(p.Addr(), p.Bits()), familyOf(p.Addr())
		}
		if p, err := netip.ParsePrefix(r.GetTo()); err == nil {
			rule.Dst, family = ipNet(p.Addr(), p.Bits()), familyOf(p.Addr())
		}
		if family != 0 {
			rule.Family = family
			out = append(out, podRule{i, rule})
			continue
		}
		v6 := *rule
		rule.Family, v6.Family = unix.AF_INET, unix.AF_INET6
		out = append(out, podRule{i, rule}, podRule{i, &v6})
	}
	return out
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// parseNeighbors converts the neighbours (without their link).
func parseNeighbors(ns []*devicev1.Neighbor) []podNeighbor {
	var out []podNeighbor
	for i, n := range ns {
		a, err := netip.ParseAddr(n.GetAddress())
		mac, merr := net.ParseMAC(n.GetMac())
		if err != nil || merr != nil {
			continue // Validate refused it
		}
		out = append(out, podNeighbor{i, &netlink.Neigh{Family: familyOf(a), State: netlink.NUD_PERMANENT, IP: net.IP(a.AsSlice()), HardwareAddr: mac}})
	}
	return out
}

// enslave puts l into the VRF want names, creating it (up, marked with
// VRFAlias) when the pod has no link of that name. A link of that name
// that is not a VRF, or a VRF of another table, is refused naming the
// field; a VRF netdra did not make is used as it is.
func (c *conn) enslave(l netlink.Link, vrf *devicev1.Vrf) error {
	if vrf == nil {
		return nil
	}
	v, err := c.lookup(vrf.GetName())
	if err != nil {
		return err
	}
	if v == nil {
		if v, err = c.addVRF(vrf); err != nil {
			return err
		}
	}
	switch existing, ok := v.(*netlink.Vrf); {
	case !ok:
		return fielderr.New("vrf.name", "%q is a %s link in the pod, not a VRF", vrf.GetName(), v.Type())
	case existing.Table != vrf.GetTable():
		return fielderr.New("vrf.table", "%d, but VRF %s in the pod has table %d", vrf.GetTable(), vrf.GetName(), existing.Table)
	}
	if l.Attrs().MasterIndex == v.Attrs().Index {
		return nil
	}
	if err := c.h.LinkSetMasterByIndex(l, v.Attrs().Index); err != nil {
		return fmt.Errorf("enslaving %s to VRF %s in %s: %w", l.Attrs().Name, vrf.GetName(), c.name, err)
	}
	l.Attrs().MasterIndex = v.Attrs().Index
	return nil
}

// addVRF creates the VRF vrf in c, marked and up. Another claim of the
// pod creating it at the same time is fine: its VRF is used. A kernel
// without VRF devices refuses the claim's vrf (a *fielderr.Error): no
// retry will make one.
func (c *conn) addVRF(vrf *devicev1.Vrf) (netlink.Link, error) {
	err := c.h.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: vrf.GetName()}, Table: vrf.GetTable()})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil, fielderr.New("vrf", "this node's kernel has no VRF devices (CONFIG_NET_VRF): %v", err)
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("creating VRF %s (table %d) in %s: %w", vrf.GetName(), vrf.GetTable(), c.name, err)
	}
	v, err := c.link(vrf.GetName())
	if err != nil {
		return nil, err
	}
	if err == nil && v.Attrs().Alias == "" {
		if err := c.h.LinkSetAlias(v, VRFAlias); err != nil {
			return nil, fmt.Errorf("marking VRF %s as created by netdra: %w", vrf.GetName(), err)
		}
		v.Attrs().Alias = VRFAlias
	}
	return v, c.setUp(v)
}

// addNeighbors adds the permanent neighbours on l, replacing an entry of
// the same address. One the kernel refuses is a field error naming the
// claim's neighbour (neighbors[N]).
func (c *conn) addNeighbors(l netlink.Link, ns []podNeighbor) error {
	for _, pn := range ns {
		n := pn.neigh
		n.LinkIndex = l.Attrs().Index
		if err := c.h.NeighSet(n); err != nil {
			return fielderr.New(fmt.Sprintf("neighbors[%d]", pn.index), "the kernel refused the neighbour %s lladdr %s dev %s in %s: %v", n.IP, n.HardwareAddr, l.Attrs().Name, c.name, err)
		}
	}
	return nil
}

// addRules adds the rules; one that exists already is fine. One the kernel
// refuses is a field error naming the claim's rule (rules[N]).
func (c *conn) addRules(rules []podRule) error {
	for _, r := range rules {
		if err := c.h.RuleAdd(r.rule); err != nil && !errors.Is(err, unix.EEXIST) {
			return fielderr.New(fmt.Sprintf("rules[%d]", r.index), "the kernel refused the rule %s in %s: %v", r.rule, c.name, err)
		}
	}
	return nil
}

// unpod deletes from c what a claim put in the pod's namespace beside its
// link and what does not go with the link: its rules, and its VRF when
// netdra made it and nothing is enslaved to it (run once the link is out
// of the VRF). Idempotent: what is gone already is fine.
func (c *conn) unpod(want config) error {
	var errs []error
	for _, r := range want.rules {
		if err := c.h.RuleDel(r.rule); err != nil && !netlinkns.IsNotFound(err) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting rule %s in %s: %w", r.rule, c.name, err))
		}
	}
	if want.vrf != nil {
		errs = append(errs, c.dropVRF(want.vrf.GetName()))
	}
	return errors.Join(errs...)
}

// dropVRF deletes the VRF name that netdra made in c, unless a link is
// still enslaved to it.
func (c *conn) dropVRF(name string) error {
	v, err := c.lookup(name)
	if err != nil || v == nil || v.Type() != "vrf" || v.Attrs().Alias != VRFAlias {
		return err
	}
	links, err := netlinkns.RetryDump(c.h.LinkList)
	if err != nil {
		return fmt.Errorf("listing the links in %s: %w", c.name, err)
	}
	for _, l := range links {
		if l.Attrs().MasterIndex == v.Attrs().Index {
			return nil
		}
	}
	return c.del(v)
}

// leaveVRF takes l out of its VRF, if it is in one.
func (c *conn) leaveVRF(l netlink.Link) error {
	if l.Attrs().MasterIndex == 0 {
		return nil
	}
	if err := c.h.LinkSetNoMaster(l); err != nil {
		return fmt.Errorf("taking %s out of its VRF in %s: %w", l.Attrs().Name, c.name, err)
	}
	l.Attrs().MasterIndex = 0
	return nil
}
