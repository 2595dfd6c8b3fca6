// Package ippool is the arithmetic of a node-local address pool, in the
// manner of the CNI host-local IPAM the SR-IOV CNI uses: a subnet, a range
// inside it, a gateway, routes and excluded addresses. It parses and
// validates a pool (errors name the field), counts its addresses and picks
// the next free one round-robin. It keeps no state: the state service owns
// which addresses are in use.
package ippool

import (
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"slices"

	"github.com/netdra/netdra/shared/fielderr"
)

// Limits of a node's pools and of a pool's lists.
const (
	MaxPools   = 32
	MaxRoutes  = 16
	MaxExclude = 64
)

// NameRE is the form of a pool name: a DNS label that may hold dots, as
// claim configs name pools.
var NameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// Spec is a pool as a user writes it (NodeConfig ipPools).
type Spec struct {
	Name       string
	Subnet     string
	RangeStart string
	RangeEnd   string
	Gateway    string
	Routes     []RouteSpec
	Exclude    []string
}

// RouteSpec is a route as written: a destination CIDR and an optional
// gateway (the pool's gateway when empty).
type RouteSpec struct {
	Destination string
	Gateway     string
}

// Route is a parsed route; Gateway is invalid (zero) when there is none.
type Route struct {
	Destination netip.Prefix
	Gateway     netip.Addr
}

// Pool is a parsed, valid pool.
type Pool struct {
	Name    string
	Subnet  netip.Prefix
	Start   netip.Addr
	End     netip.Addr
	Gateway netip.Addr // zero when none
	Routes  []Route
	Exclude []netip.Prefix
}

// Parse validates s and returns the pool. Unset range ends default to the
// first and last host addresses of the subnet (for IPv4 the network and
// broadcast addresses are never handed out, except in a /31 or /32).
// Errors are *fielderr.Error with fields relative to the pool ("subnet",
// "rangeStart", "routes[1].gateway").
func Parse(s Spec) (*Pool, error) {
	p, err := parseRange(s)
	if err != nil {
		return nil, err
	}
	if p.Start.Compare(p.End) > 0 {
		return nil, fielderr.New("rangeEnd", "%s is before rangeStart %s", p.End, p.Start)
	}
	if err := p.checkUnicast(s); err != nil {
		return nil, err
	}
	if err := p.parseGateway(s); err != nil {
		return nil, err
	}
	if err := p.parseRoutes(s.Routes); err != nil {
		return nil, err
	}
	if err := p.parseExcludes(s.Exclude); err != nil {
		return nil, err
	}
	if p.Size().Sign() == 0 {
		field := "exclude"
		if len(s.Exclude) == 0 {
			field = "gateway" // the range's only address
		}
		return nil, fielderr.New(field, "no address of %s-%s is left to hand out", p.Start, p.End)
	}
	return p, nil
}

// parseGateway sets the pool's gateway: a unicast address in the subnet,
// outside an explicit range.
func (p *Pool) parseGateway(s Spec) error {
	if s.Gateway == "" {
		return nil
	}
	var err error
	if p.Gateway, err = inSubnet("gateway", s.Gateway, p.Subnet, netip.Addr{}); err != nil {
		return err
	}
	if !Unicast(p.Gateway) {
		return fielderr.New("gateway", "%s is not a unicast address", p.Gateway)
	}
	if p.Contains(p.Gateway) && (s.RangeStart != "" || s.RangeEnd != "") {
		return fielderr.New("gateway", "%s is inside the range %s-%s; the gateway is never handed out, put it outside the range", p.Gateway, p.Start, p.End)
	}
	return nil
}

// parseRoutes sets the pool's routes, of the subnet's family, through the
// pool's gateway unless a route names its own.
func (p *Pool) parseRoutes(routes []RouteSpec) error {
	if len(routes) > MaxRoutes {
		return fielderr.New("routes", "%d routes, more than %d", len(routes), MaxRoutes)
	}
	is4 := p.Subnet.Addr().Is4()
	for i, r := range routes {
		f := fmt.Sprintf("routes[%d]", i)
		dst, err := netip.ParsePrefix(r.Destination)
		if err != nil {
			return fielderr.New(f+".destination", "%q is not a CIDR: %v", r.Destination, err)
		}
		if dst.Addr().Is4() != is4 || dst.Addr().Is4In6() {
			return fielderr.New(f+".destination", "%s is not of the subnet's IP family", dst)
		}
		route := Route{Destination: dst.Masked(), Gateway: p.Gateway}
		if r.Gateway != "" {
			gw, err := netip.ParseAddr(r.Gateway)
			if err != nil {
				return fielderr.New(f+".gateway", "%q is not an IP address", r.Gateway)
			}
			if gw.Is4() != is4 {
				return fielderr.New(f+".gateway", "%s is not of the subnet's IP family", gw)
			}
			if !Unicast(gw) {
				return fielderr.New(f+".gateway", "%q is not a unicast address", r.Gateway)
			}
			route.Gateway = gw
		}
		p.Routes = append(p.Routes, route)
	}
	return nil
}

// parseExcludes sets the addresses of the range never handed out.
func (p *Pool) parseExcludes(excludes []string) error {
	if len(excludes) > MaxExclude {
		return fielderr.New("exclude", "%d entries, more than %d", len(excludes), MaxExclude)
	}
	for i, e := range excludes {
		x, err := parseExclude(fmt.Sprintf("exclude[%d]", i), e, p.Subnet)
		if err != nil {
			return err
		}
		p.Exclude = append(p.Exclude, x)
	}
	return nil
}

// parseRange checks s's name and subnet and returns the pool with them and
// its range ends, which default to the subnet's first and last host
// addresses.
func parseRange(s Spec) (*Pool, error) {
	if !NameRE.MatchString(s.Name) {
		return nil, fielderr.New("name", "%q is not a pool name: lower-case letters, digits, '-' and '.', at most 63, starting and ending with a letter or digit", s.Name)
	}
	subnet, err := netip.ParsePrefix(s.Subnet)
	if err != nil {
		return nil, fielderr.New("subnet", "%q is not a CIDR: %v", s.Subnet, err)
	}
	if subnet != subnet.Masked() {
		return nil, fielderr.New("subnet", "%q has host bits set; the subnet is %s", s.Subnet, subnet.Masked())
	}
	if subnet.Addr().Is4In6() {
		return nil, fielderr.New("subnet", "%q is an IPv4-mapped IPv6 subnet; write it as IPv4", s.Subnet)
	}
	p := &Pool{Name: s.Name, Subnet: subnet}
	first, last := hostBounds(subnet)
	if p.Start, err = inSubnet("rangeStart", s.RangeStart, subnet, first); err != nil {
		return nil, err
	}
	if p.End, err = inSubnet("rangeEnd", s.RangeEnd, subnet, last); err != nil {
		return nil, err
	}
	return p, nil
}

// parseExclude parses the exclude entry e, named field: an address or a
// CIDR inside subnet.
func parseExclude(field, e string, subnet netip.Prefix) (netip.Prefix, error) {
	x, err := parseAddrOrPrefix(e)
	if err != nil {
		return netip.Prefix{}, fielderr.New(field, "%q is neither an IP address nor a CIDR", e)
	}
	if !subnet.Contains(x.Addr()) || x.Bits() < subnet.Bits() {
		return netip.Prefix{}, fielderr.New(field, "%s is not inside the subnet %s", x, subnet)
	}
	return x, nil
}

// ParseAll parses a node's pools: each valid, names unique, the ranges of
// one family disjoint (an address belongs to one pool). Errors name fields
// from field: "ipPools[1].rangeStart".
func ParseAll(field string, specs []Spec) ([]*Pool, error) {
	if len(specs) > MaxPools {
		return nil, fielderr.New(field, "%d pools, more than %d", len(specs), MaxPools)
	}
	var out []*Pool
	for i, s := range specs {
		f := fmt.Sprintf("%s[%d]", field, i)
		p, err := Parse(s)
		if err != nil {
			return nil, fielderr.Prefix(f, err)
		}
		for j, q := range out {
			if q.Name == p.Name {
				return nil, fielderr.New(f+".name", "%q is also the name of %s[%d]: pool names are unique", p.Name, field, j)
			}
			if q.Is4() == p.Is4() && p.Start.Compare(q.End) <= 0 && q.Start.Compare(p.End) <= 0 {
				return nil, fielderr.New(f+".rangeStart", "the range %s-%s overlaps pool %q's %s-%s: an address belongs to one pool", p.Start, p.End, q.Name, q.Start, q.End)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func parseAddrOrPrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	x, err := netip.ParsePrefix(s)
	return x.Masked(), err
}

// Unicast reports whether a can be an interface address or a next hop, as
// the provisioner's Attach takes them: valid and not Unusable. The claim
// config, the pools and the provisioner all ask here, so the three agree.
func Unicast(a netip.Addr) bool {
	return a.IsValid() && Unusable(a) == ""
}

// Unusable says why a cannot be an interface address or a next hop (a
// zone, IPv4-mapped IPv6, the unspecified, a multicast or the IPv4
// broadcast address), or returns "".
func Unusable(a netip.Addr) string {
	switch {
	case a.Zone() != "":
		return "zones are not allowed"
	case a.Is4In6():
		return "IPv4-mapped IPv6; write it as IPv4"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsMulticast():
		return "a multicast address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	}
	return ""
}

// notUnicast are the blocks of addresses Unicast refuses, IPv4 then IPv6.
var notUnicast = [2][][2]netip.Addr{
	{
		{netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("0.0.0.0")},
		{netip.MustParseAddr("224.0.0.0"), netip.MustParseAddr("239.255.255.255")},
		{netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("255.255.255.255")},
	},
	{
		{netip.MustParseAddr("::"), netip.MustParseAddr("::")},
		{netip.MustParseAddr("::ffff:0.0.0.0"), netip.MustParseAddr("::ffff:255.255.255.255")},
		{netip.MustParseAddr("ff00::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")},
	},
}

// checkUnicast refuses a range that holds an address no interface takes
// (see Unicast): the pool would hand it out and the claim fail at Attach.
func (p *Pool) checkUnicast(s Spec) error {
	fam := 1
	if p.Is4() {
		fam = 0
	}
	field := "subnet"
	switch {
	case s.RangeStart != "":
		field = "rangeStart"
	case s.RangeEnd != "":
		field = "rangeEnd"
	}
	for _, b := range notUnicast[fam] {
		if p.Start.Compare(b[1]) <= 0 && b[0].Compare(p.End) <= 0 {
			return fielderr.New(field, "the range %s-%s holds %s-%s, addresses no interface takes (unspecified, IPv4-mapped, multicast or broadcast)",
				p.Start, p.End, maxAddr(p.Start, b[0]), minAddr(p.End, b[1]))
		}
	}
	return nil
}

func inSubnet(field, s string, subnet netip.Prefix, def netip.Addr) (netip.Addr, error) {
	if s == "" {
		return def, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fielderr.New(field, "%q is not an IP address", s)
	}
	if !subnet.Contains(a) {
		return netip.Addr{}, fielderr.New(field, "%s is not inside the subnet %s", a, subnet)
	}
	return a, nil
}

// HostBounds returns the first and last addresses subnet hands out when a
// pool sets no range (see hostBounds).
func HostBounds(subnet netip.Prefix) (first, last netip.Addr) { return hostBounds(subnet) }

// hostBounds returns the first and last addresses a subnet hands out by
// default: without the network address, and without the broadcast address
// for IPv4 (a /31 or /32 keeps both).
func hostBounds(subnet netip.Prefix) (first, last netip.Addr) {
	first, last = subnet.Addr(), LastAddr(subnet)
	if subnet.Bits() >= subnet.Addr().BitLen()-1 {
		return first, last
	}
	first = first.Next()
	if subnet.Addr().Is4() {
		last = last.Prev()
	}
	return first, last
}

// LastAddr is the last address of a prefix.
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Is4 reports whether the pool is IPv4.
func (p *Pool) Is4() bool { return p.Subnet.Addr().Is4() }

// Contains reports whether a is in the pool's range.
func (p *Pool) Contains(a netip.Addr) bool {
	return a.BitLen() == p.Start.BitLen() && p.Start.Compare(a) <= 0 && a.Compare(p.End) <= 0
}

// Usable reports whether a may be handed out: in the range, not the
// gateway and not excluded.
func (p *Pool) Usable(a netip.Addr) bool {
	return p.Contains(a) && a != p.Gateway && p.excluded(a) == nil
}

func (p *Pool) excluded(a netip.Addr) *netip.Prefix {
	for i := range p.Exclude {
		if p.Exclude[i].Contains(a) {
			return &p.Exclude[i]
		}
	}
	return nil
}

// Prefix is a as an address of the pool's subnet (10.0.0.7/24).
func (p *Pool) Prefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, p.Subnet.Bits()) }

// Size is how many addresses the pool can hand out.
func (p *Pool) Size() *big.Int {
	n := span(p.Start, p.End)
	// Excluded addresses inside the range, overlaps counted once.
	var iv [][2]netip.Addr
	for _, x := range p.Exclude {
		lo, hi := maxAddr(x.Addr(), p.Start), minAddr(LastAddr(x), p.End)
		if lo.Compare(hi) <= 0 {
			iv = append(iv, [2]netip.Addr{lo, hi})
		}
	}
	slices.SortFunc(iv, func(a, b [2]netip.Addr) int { return a[0].Compare(b[0]) })
	var cur [2]netip.Addr
	for i, x := range iv {
		switch {
		case i == 0:
			cur = x
		case x[0].Compare(cur[1]) <= 0 || x[0] == cur[1].Next():
			cur[1] = maxAddr(cur[1], x[1])
		default:
			n.Sub(n, span(cur[0], cur[1]))
			cur = x
		}
	}
	if len(iv) > 0 {
		n.Sub(n, span(cur[0], cur[1]))
	}
	if p.Gateway.IsValid() && p.Contains(p.Gateway) && p.excluded(p.Gateway) == nil {
		n.Sub(n, big.NewInt(1))
	}
	return n
}

func span(lo, hi netip.Addr) *big.Int {
	n := new(big.Int).Sub(new(big.Int).SetBytes(hi.AsSlice()), new(big.Int).SetBytes(lo.AsSlice()))
	return n.Add(n, big.NewInt(1))
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

func minAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}

// Next returns the first usable address after the cursor (round-robin, as
// host-local does, so a released address is not handed out again at once)
// for which inUse is false, wrapping at the end of the range; false when
// every usable address is in use. A cursor outside the range starts at
// the range's start. The walk jumps over excluded prefixes, so it visits
// at most the in-use addresses plus one per excluded prefix.
func (p *Pool) Next(cursor netip.Addr, inUse func(netip.Addr) bool) (netip.Addr, bool) {
	start := p.Start
	if p.Contains(cursor) && cursor != p.End {
		start = cursor.Next()
	}
	a, wrapped := start, false
	for {
		if wrapped && a.Compare(start) >= 0 {
			return netip.Addr{}, false
		}
		if x := p.excluded(a); x != nil {
			a = LastAddr(*x)
		} else if a != p.Gateway && !inUse(a) {
			return a, true
		}
		if a.Compare(p.End) >= 0 {
			if wrapped {
				return netip.Addr{}, false
			}
			a, wrapped = p.Start, true
			continue
		}
		a = a.Next()
	}
}
