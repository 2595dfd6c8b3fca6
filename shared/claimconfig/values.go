package claimconfig

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"

	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/ippool"
)

var (
	poolNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)
)

// MaxIfNameLen is the longest interface name the kernel takes (IFNAMSIZ-1).
const MaxIfNameLen = 15

// ValidateIfName checks an interface name netdra gives a link (the claim's
// podIfName; the provisioner's and the netns hook's names): empty (none),
// or what the kernel's dev_valid_name accepts in letters, digits, '.', '_'
// and '-' (no '%', which the kernel would take as a pattern, "eth%d", and
// expand). A bad one is a *fielderr.Error for field.
func ValidateIfName(field, name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > MaxIfNameLen:
		return fielderr.New(field, "%q is longer than %d bytes", name, MaxIfNameLen)
	case name == "." || name == ".." || name == "lo":
		return fielderr.New(field, "%q is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fielderr.New(field, "%q contains %q: use letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return nil
}

func validMAC(s string) error {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil || len(mac) != 6:
		return fielderr.New("mac", "%q is not a 48-bit MAC address", s)
	case mac[0]&1 == 1:
		return fielderr.New("mac", "%q is a multicast address", s)
	case mac.String() == "00:00:00:00:00:00":
		return fielderr.New("mac", "%q is all zeros", s)
	}
	return nil
}

func validCIDR(field, s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return fielderr.New(field, "%q is not an address in CIDR form (10.0.0.2/24, fd00::2/64)", s)
	}
	if !ippool.Unicast(p.Addr()) {
		return fielderr.New(field, "%q is not a unicast address", s)
	}
	return nil
}

func validRoute(field string, r Route) error {
	dst, err := netip.ParsePrefix(r.Destination)
	if err != nil {
		return fielderr.New(field+".destination", "%q is not a prefix in CIDR form (10.0.0.0/8, ::/0)", r.Destination)
	}
	if dst.Addr().Is4In6() {
		return fielderr.New(field+".destination", "%q is IPv4-mapped IPv6; write it as IPv4", r.Destination)
	}
	if dst.Masked() != dst {
		return fielderr.New(field+".destination", "%q has host bits set; the prefix is %s", r.Destination, dst.Masked())
	}
	if r.Gateway == "" {
		return nil
	}
	gw, err := netip.ParseAddr(r.Gateway)
	if err != nil {
		return fielderr.New(field+".gateway", "%q is not an IP address", r.Gateway)
	}
	if !ippool.Unicast(gw) {
		return fielderr.New(field+".gateway", "%q is not a unicast address", r.Gateway)
	}
	if gw.Is4() != dst.Addr().Is4() {
		return fielderr.New(field+".gateway", "%s and destination %s are of different IP families", r.Gateway, r.Destination)
	}
	return nil
}

func validPools(pools []string) error {
	if len(pools) > 2 {
		return fielderr.New("ipPools", "at most two pools (one per IP family), got %d", len(pools))
	}
	for i, p := range pools {
		if !poolNameRE.MatchString(p) {
			return fielderr.New(fmt.Sprintf("ipPools[%d]", i), "%q is not a pool name", p)
		}
	}
	return nil
}
