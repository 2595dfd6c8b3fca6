package ippool

import (
	"errors"
	"math/big"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/netdra/netdra/shared/fielderr"
)

// fuzzFields are the fields a rejection of Parse may name.
var fuzzFields = regexp.MustCompile(`^(name|subnet|rangeStart|rangeEnd|gateway|routes|routes\[\d+\]\.(destination|gateway)|exclude|exclude\[\d+\])$`)

// specOf builds a spec from fuzz strings; lists are comma-separated, a
// route is destination>gateway.
func specOf(name, subnet, start, end, gateway, routes, exclude string) Spec {
	s := Spec{Name: name, Subnet: subnet, RangeStart: start, RangeEnd: end, Gateway: gateway}
	if routes != "" {
		for _, r := range strings.Split(routes, ",") {
			dst, gw, _ := strings.Cut(r, ">")
			s.Routes = append(s.Routes, RouteSpec{Destination: dst, Gateway: gw})
		}
	}
	if exclude != "" {
		s.Exclude = strings.Split(exclude, ",")
	}
	return s
}

// FuzzParse: a rejected spec is a *fielderr.Error naming one of the
// spec's fields, the same every time; an accepted pool has its range
// inside the subnet, in order and of the subnet's family, a gateway (if
// any) inside the subnet and outside an explicit range, exclusions inside
// the subnet, and something to hand out; for a range of at most 4096
// addresses, Size is the number of Usable addresses in it.
func FuzzParse(f *testing.F) {
	f.Add("a", "10.0.0.0/24", "", "", "10.0.0.1", "0.0.0.0/0", "10.0.0.16/29,10.0.0.20")
	f.Add("a", "10.0.0.0/31", "", "", "", "", "")
	f.Add("a", "10.0.0.7/32", "", "", "10.0.0.7", "", "")
	f.Add("v6", "fd00::/64", "fd00::10", "fd00::1f", "fd00::1", "::/0>fd00::1", "fd00::10/126")
	f.Add("v6", "fd00::/127", "", "", "", "", "")
	f.Add("edge", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120", "", "", "", "", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe")
	f.Add("mapped", "::ffff:10.0.0.0/120", "", "", "", "", "")
	f.Add("top", "255.255.255.254/31", "", "", "", "", "")
	f.Add("multicast", "224.0.0.0/24", "", "", "", "", "")
	f.Add("mapped-range", "::/64", "::ffff:10.0.0.1", "::ffff:10.0.0.9", "", "", "")
	f.Add("zone", "fe80::/64", "fe80::1%eth0", "", "fe80::2%eth0", "::/0>fe80::3%eth0", "fe80::4%eth0")
	f.Fuzz(func(t *testing.T, name, subnet, start, end, gateway, routes, exclude string) {
		spec := specOf(name, subnet, start, end, gateway, routes, exclude)
		p, err := Parse(spec)
		_, again := Parse(spec)
		if err != nil {
			var fe *fielderr.Error
			if !errors.As(err, &fe) || !fuzzFields.MatchString(fe.Field) {
				t.Fatalf("Parse(%+v) = %v, want a *fielderr.Error naming a field of the spec", spec, err)
			}
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("Parse(%+v) is not deterministic: %v, then %v", spec, err, again)
			}
			return
		}
		if again != nil {
			t.Fatalf("Parse(%+v) is not deterministic: accepted, then %v", spec, again)
		}
		checkPool(t, spec, p)
	})
}

func checkPool(t *testing.T, spec Spec, p *Pool) {
	t.Helper()
	switch {
	case !p.Subnet.Contains(p.Start) || !p.Subnet.Contains(p.End):
		t.Fatalf("%+v: range %s-%s is not inside %s", spec, p.Start, p.End, p.Subnet)
	case p.Start.Compare(p.End) > 0:
		t.Fatalf("%+v: range %s-%s is reversed", spec, p.Start, p.End)
	case p.Start.Is4() != p.Is4() || p.End.Is4() != p.Is4():
		t.Fatalf("%+v: range %s-%s is not of the family of %s", spec, p.Start, p.End, p.Subnet)
	case p.Gateway.IsValid() && !p.Subnet.Contains(p.Gateway):
		t.Fatalf("%+v: gateway %s is not inside %s", spec, p.Gateway, p.Subnet)
	case p.Gateway.IsValid() && (spec.RangeStart != "" || spec.RangeEnd != "") && p.Contains(p.Gateway):
		t.Fatalf("%+v: gateway %s is inside the explicit range", spec, p.Gateway)
	case p.Size().Sign() <= 0:
		t.Fatalf("%+v: accepted with nothing to hand out (size %s)", spec, p.Size())
	}
	for i, r := range p.Routes {
		if r.Destination.Addr().Is4In6() || (r.Gateway.IsValid() && !Unicast(r.Gateway)) {
			t.Fatalf("%+v: routes[%d] %s via %s is not one Attach takes", spec, i, r.Destination, r.Gateway)
		}
	}
	if p.Gateway.IsValid() && !Unicast(p.Gateway) {
		t.Fatalf("%+v: gateway %s is not unicast", spec, p.Gateway)
	}
	for _, x := range p.Exclude {
		if !p.Subnet.Contains(x.Addr()) || x.Bits() < p.Subnet.Bits() {
			t.Fatalf("%+v: exclusion %s is not inside %s", spec, x, p.Subnet)
		}
	}
	if span(p.Start, p.End).Cmp(big.NewInt(4096)) > 0 {
		return
	}
	var usable int64
	for a := p.Start; a.IsValid() && a.Compare(p.End) <= 0; a = a.Next() {
		if p.Usable(a) {
			usable++
		}
		if !Unicast(a) {
			t.Fatalf("%+v: the range %s-%s holds %s, which no interface takes", spec, p.Start, p.End, a)
		}
	}
	if p.Size().Cmp(big.NewInt(usable)) != 0 {
		t.Fatalf("%+v: Size %s, but %d addresses of %s-%s are usable", spec, p.Size(), usable, p.Start, p.End)
	}
}

// FuzzNext allocates from a pool until it is exhausted (or 512 times):
// every address is usable (in the range, inside the subnet, neither the
// gateway nor excluded), none is handed out twice, and the pool runs out
// exactly after Size addresses. Then one address is released: the next
// allocation is that one. The first allocation from a cursor is the first
// usable address after it, round-robin.
func FuzzNext(f *testing.F) {
	f.Add("10.0.0.0/29", "", "", "10.0.0.1", "10.0.0.4", "10.0.0.5", uint16(2))
	f.Add("10.0.0.0/24", "10.0.0.250", "10.0.0.254", "", "10.0.0.250/31", "10.0.0.254", uint16(0))
	f.Add("fd00::/120", "fd00::f0", "", "fd00::1", "fd00::f8/125", "fd00::ff", uint16(7))
	f.Add("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124", "", "", "", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", uint16(1))
	f.Add("255.255.255.248/29", "", "", "", "", "255.255.255.254", uint16(3))
	f.Add("0.0.0.0/30", "", "", "0.0.0.2", "", "", uint16(0))
	f.Add("10.0.0.0/30", "", "", "", "10.0.0.1,10.0.0.2/31", "", uint16(0))
	f.Fuzz(func(t *testing.T, subnet, start, end, gateway, exclude, cursor string, release uint16) {
		spec := specOf("p", subnet, start, end, gateway, "", exclude)
		p, err := Parse(spec)
		if err != nil {
			return
		}
		if c, err := netip.ParseAddr(cursor); err == nil {
			checkFirstAfter(t, p, c)
		}
		used := map[netip.Addr]bool{}
		var order []netip.Addr
		var cur netip.Addr
		for len(order) < 512 {
			a, ok := p.Next(cur, func(a netip.Addr) bool { return used[a] })
			if !ok {
				break
			}
			switch {
			case !p.Usable(a) || !p.Subnet.Contains(a):
				t.Fatalf("%+v: Next handed out %s, which is not usable", spec, a)
			case used[a]:
				t.Fatalf("%+v: Next handed out %s twice", spec, a)
			}
			used[a], cur = true, a
			order = append(order, a)
		}
		if len(order) == 512 {
			return
		}
		if got := p.Size(); got.Cmp(big.NewInt(int64(len(order)))) != 0 {
			t.Fatalf("%+v: exhausted after %d addresses, but Size is %s", spec, len(order), got)
		}
		freed := order[int(release)%len(order)]
		delete(used, freed)
		if a, ok := p.Next(cur, func(a netip.Addr) bool { return used[a] }); !ok || a != freed {
			t.Fatalf("%+v: after releasing %s, Next gave %s, %v", spec, freed, a, ok)
		}
	})
}

// checkFirstAfter checks Next from cursor c on an empty pool against a
// walk of the range, for ranges of at most 4096 addresses.
func checkFirstAfter(t *testing.T, p *Pool, c netip.Addr) {
	t.Helper()
	if span(p.Start, p.End).Cmp(big.NewInt(4096)) > 0 {
		return
	}
	var all []netip.Addr
	for a := p.Start; a.IsValid() && a.Compare(p.End) <= 0; a = a.Next() {
		if p.Usable(a) {
			all = append(all, a)
		}
	}
	want := all[0]
	if p.Contains(c) {
		for _, a := range all {
			if a.Compare(c) > 0 {
				want = a
				break
			}
		}
	}
	if got, ok := p.Next(c, func(netip.Addr) bool { return false }); !ok || got != want {
		t.Fatalf("pool %s-%s: Next(%s) = %s, %v; want %s", p.Start, p.End, c, got, ok, want)
	}
}
