package ippool

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/netdra/netdra/shared/fielderr"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       Spec
		wantField  string
		start, end string
		size       int64
	}{
		{name: "v4 defaults", spec: Spec{Name: "a", Subnet: "10.0.0.0/24"}, start: "10.0.0.1", end: "10.0.0.254", size: 254},
		{name: "v4 gateway in default range skipped", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Gateway: "10.0.0.1"}, start: "10.0.0.1", end: "10.0.0.254", size: 253},
		{name: "v4 /31", spec: Spec{Name: "a", Subnet: "10.0.0.0/31"}, start: "10.0.0.0", end: "10.0.0.1", size: 2},
		{name: "v6 range", spec: Spec{Name: "a", Subnet: "fd00::/64", RangeStart: "fd00::10", RangeEnd: "fd00::1f", Gateway: "fd00::1"}, start: "fd00::10", end: "fd00::1f", size: 16},
		{name: "exclusions overlap", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.10", RangeEnd: "10.0.0.59",
			Exclude: []string{"10.0.0.16/29", "10.0.0.20", "10.0.0.0/28", "10.0.0.24/30"}}, start: "10.0.0.10", end: "10.0.0.59", size: 50 - 6 - 8 - 4},
		{name: "bad name", spec: Spec{Name: "A", Subnet: "10.0.0.0/24"}, wantField: "name"},
		{name: "bad subnet", spec: Spec{Name: "a", Subnet: "10.0.0.0"}, wantField: "subnet"},
		{name: "host bits", spec: Spec{Name: "a", Subnet: "10.0.0.1/24"}, wantField: "subnet"},
		{name: "start outside", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.1.1"}, wantField: "rangeStart"},
		{name: "end before start", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.9", RangeEnd: "10.0.0.8"}, wantField: "rangeEnd"},
		{name: "gateway outside subnet", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Gateway: "10.0.1.1"}, wantField: "gateway"},
		{name: "gateway in explicit range", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.1", Gateway: "10.0.0.5"}, wantField: "gateway"},
		{name: "route family", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Routes: []RouteSpec{{Destination: "::/0"}}}, wantField: "routes[0].destination"},
		{name: "route gateway", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Routes: []RouteSpec{{Destination: "0.0.0.0/0", Gateway: "x"}}}, wantField: "routes[0].gateway"},
		{name: "exclude outside", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Exclude: []string{"10.0.0.0/16"}}, wantField: "exclude[0]"},
		{name: "multicast subnet", spec: Spec{Name: "a", Subnet: "224.0.0.0/24"}, wantField: "subnet"},
		{name: "broadcast in a /31", spec: Spec{Name: "a", Subnet: "255.255.255.254/31"}, wantField: "subnet"},
		{name: "unspecified in a /31", spec: Spec{Name: "a", Subnet: "0.0.0.0/31"}, wantField: "subnet"},
		{name: "v6 multicast", spec: Spec{Name: "a", Subnet: "ff02::/120"}, wantField: "subnet"},
		{name: "IPv4-mapped range", spec: Spec{Name: "a", Subnet: "::/64", RangeStart: "::ffff:10.0.0.1", RangeEnd: "::ffff:10.0.0.9"}, wantField: "rangeStart"},
		{name: "unspecified gateway", spec: Spec{Name: "a", Subnet: "0.0.0.0/24", Gateway: "0.0.0.0"}, wantField: "gateway"},
		{name: "route gateway with a zone", spec: Spec{Name: "a", Subnet: "fd00::/64", Routes: []RouteSpec{{Destination: "::/0", Gateway: "fe80::1%eth0"}}}, wantField: "routes[0].gateway"},
		{name: "multicast route gateway", spec: Spec{Name: "a", Subnet: "10.0.0.0/24", Routes: []RouteSpec{{Destination: "0.0.0.0/0", Gateway: "224.0.0.1"}}}, wantField: "routes[0].gateway"},
		{name: "IPv4-mapped route", spec: Spec{Name: "a", Subnet: "fd00::/64", Routes: []RouteSpec{{Destination: "::ffff:0.0.0.0/96"}}}, wantField: "routes[0].destination"},
		{name: "exclude with a zone", spec: Spec{Name: "a", Subnet: "fe80::/64", Exclude: []string{"fe80::1%eth0"}}, wantField: "exclude[0]"},
		{name: "gateway is the only address", spec: Spec{Name: "a", Subnet: "10.0.0.7/32", Gateway: "10.0.0.7"}, wantField: "gateway"},
		{name: "all excluded", spec: Spec{Name: "a", Subnet: "10.0.0.0/30", Exclude: []string{"10.0.0.0/30"}}, wantField: "exclude"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.spec)
			if tc.wantField != "" {
				var fe *fielderr.Error
				if !errors.As(err, &fe) || fe.Field != tc.wantField {
					t.Fatalf("got %v, want an error on %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Start.String() != tc.start || p.End.String() != tc.end {
				t.Errorf("range %s-%s, want %s-%s", p.Start, p.End, tc.start, tc.end)
			}
			if got := p.Size().Int64(); got != tc.size {
				t.Errorf("size %d, want %d", got, tc.size)
			}
		})
	}
}

func TestNext(t *testing.T) {
	p, err := Parse(Spec{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.2", RangeEnd: "10.0.0.9",
		Gateway: "10.0.0.1", Exclude: []string{"10.0.0.4/31"}})
	if err != nil {
		t.Fatal(err)
	}
	used := map[netip.Addr]bool{}
	inUse := func(a netip.Addr) bool { return used[a] }
	var cursor netip.Addr
	var got []string
	for {
		a, ok := p.Next(cursor, inUse)
		if !ok {
			break
		}
		if !p.Usable(a) || used[a] {
			t.Fatalf("handed out %s", a)
		}
		used[a], cursor = true, a
		got = append(got, a.String())
	}
	want := []string{"10.0.0.2", "10.0.0.3", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9"}
	if len(got) != len(want) || int64(len(got)) != p.Size().Int64() {
		t.Fatalf("got %v, want %v (size %d)", got, want, p.Size())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// Round-robin: a released address is handed out after the others.
	delete(used, netip.MustParseAddr("10.0.0.3"))
	delete(used, netip.MustParseAddr("10.0.0.8"))
	if a, _ := p.Next(netip.MustParseAddr("10.0.0.6"), inUse); a.String() != "10.0.0.8" {
		t.Errorf("after 10.0.0.6 got %s, want 10.0.0.8", a)
	}
	if a, _ := p.Next(netip.MustParseAddr("10.0.0.9"), inUse); a.String() != "10.0.0.3" {
		t.Errorf("after the end got %s, want the wrap to 10.0.0.3", a)
	}
}

func TestNextLargeV6(t *testing.T) {
	p, err := Parse(Spec{Name: "v6", Subnet: "fd00::/64", Exclude: []string{"fd00::/65"}})
	if err != nil {
		t.Fatal(err)
	}
	a, ok := p.Next(netip.Addr{}, func(netip.Addr) bool { return false })
	if !ok || a.String() != "fd00::8000:0:0:0" {
		t.Fatalf("got %s %v, want the first address after the excluded half", a, ok)
	}
	if p.Size().String() != "9223372036854775808" {
		t.Errorf("size %s", p.Size())
	}
}
