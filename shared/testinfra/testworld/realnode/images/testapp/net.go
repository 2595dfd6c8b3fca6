package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// printNet prints, one a line, what the container sees around interface
// name, and returns the exit code (1 when the interface is not there):
//
//	link NAME mtu N hw MAC <FLAGS>
//	master NAME vrf table T             (a VRF it is enslaved to)
//	master NAME TYPE                    (any other master)
//	addr CIDR valid_lft N|forever preferred_lft N|forever
//	rule PRIO: from SRC to DST iif I oif O fwmark M/MASK lookup T
//	neigh ADDR lladdr MAC STATE[,STATE]  (PERMANENT for a permanent one)
//	route table T DST via GW src S dev IF proto P metric M
//
// The routes are those of every table but local (a VRF's too). Each
// sysctl argument, a key with dots ("net.ipv4.conf.net1.rp_filter", read
// under /proc/sys) or a path under /proc/sys with slashes (for an
// interface name with a dot), prints "sysctl KEY = VALUE" or
// "sysctl KEY: ERROR".
func printNet(name string, sysctls []string) int {
	l, err := netlink.LinkByName(name)
	if err != nil {
		fmt.Printf("link %s: %v\n", name, err)
		return 1
	}
	a := l.Attrs()
	fmt.Printf("link %s mtu %d hw %s <%s>\n", a.Name, a.MTU, a.HardwareAddr, a.Flags)
	if a.MasterIndex != 0 {
		m, err := netlink.LinkByIndex(a.MasterIndex)
		switch v := m.(type) {
		case nil:
			fmt.Printf("master %d: %v\n", a.MasterIndex, err)
		case *netlink.Vrf:
			fmt.Printf("master %s vrf table %d\n", v.Name, v.Table)
		default:
			fmt.Printf("master %s %s\n", m.Attrs().Name, m.Type())
		}
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		fmt.Println("addr:", err)
	}
	for _, ad := range addrs {
		fmt.Printf("addr %s valid_lft %s preferred_lft %s\n", ad.IPNet, lifetime(ad.ValidLft), lifetime(ad.PreferedLft))
	}
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		fmt.Println("rule:", err)
	}
	for _, r := range rules {
		fmt.Println(ruleLine(r))
	}
	neighs, err := netlink.NeighList(a.Index, netlink.FAMILY_ALL)
	if err != nil {
		fmt.Println("neigh:", err)
	}
	for _, n := range neighs {
		if n.IP == nil {
			continue
		}
		fmt.Printf("neigh %s lladdr %s %s\n", n.IP, n.HardwareAddr, neighState(n.State))
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		fmt.Println("route:", err)
	}
	for _, r := range routes {
		if r.Table != unix.RT_TABLE_LOCAL {
			fmt.Println(routeLine(r))
		}
	}
	for _, k := range sysctls {
		p := k
		if !strings.Contains(k, "/") {
			p = strings.ReplaceAll(k, ".", "/")
		}
		b, err := os.ReadFile(filepath.Join("/proc/sys", filepath.Clean("/"+p)))
		if err != nil {
			fmt.Printf("sysctl %s: %v\n", k, err)
			continue
		}
		fmt.Printf("sysctl %s = %s\n", k, strings.TrimSpace(string(b)))
	}
	return 0
}

// lifetime is an address lifetime as ip prints it: seconds, or forever.
func lifetime(s int) string {
	if uint32(s) == math.MaxUint32 {
		return "forever"
	}
	return fmt.Sprintf("%dsec", s)
}

func ruleLine(r netlink.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %d:", r.Priority)
	if r.Src != nil {
		fmt.Fprintf(&b, " from %s", r.Src)
	} else {
		b.WriteString(" from all")
	}
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", r.Dst)
	}
	if r.IifName != "" {
		fmt.Fprintf(&b, " iif %s", r.IifName)
	}
	if r.OifName != "" {
		fmt.Fprintf(&b, " oif %s", r.OifName)
	}
	if r.Mark != 0 || r.Mask != nil {
		fmt.Fprintf(&b, " fwmark %#x", r.Mark)
		if r.Mask != nil {
			fmt.Fprintf(&b, "/%#x", *r.Mask)
		}
	}
	switch {
	case r.Table == 0:
		// A rule without a table and without a goto is the l3mdev rule
		// (netlink has no field for its attribute).
		b.WriteString(" lookup [l3mdev-table]")
	default:
		fmt.Fprintf(&b, " lookup %s", tableName(r.Table))
	}
	if r.Family == unix.AF_INET6 {
		b.WriteString(" (ipv6)")
	}
	return b.String()
}

func tableName(t int) string {
	switch t {
	case unix.RT_TABLE_MAIN:
		return "main"
	case unix.RT_TABLE_LOCAL:
		return "local"
	case unix.RT_TABLE_DEFAULT:
		return "default"
	}
	return fmt.Sprint(t)
}

func routeLine(r netlink.Route) string {
	var b strings.Builder
	fmt.Fprintf(&b, "route table %s ", tableName(r.Table))
	switch {
	case r.Dst != nil:
		b.WriteString(r.Dst.String())
	default:
		b.WriteString("default")
	}
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
		fmt.Fprintf(&b, " dev %s", l.Attrs().Name)
	}
	fmt.Fprintf(&b, " proto %s scope %s", r.Protocol, r.Scope)
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	return b.String()
}

// neighState names the NUD_* bits of state as ip does.
func neighState(state int) string {
	names := []struct {
		bit  int
		name string
	}{{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"}, {netlink.NUD_STALE, "STALE"},
		{netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"}, {netlink.NUD_FAILED, "FAILED"},
		{netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"}}
	var out []string
	for _, n := range names {
		if state&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "NONE"
	}
	return strings.Join(out, ",")
}
