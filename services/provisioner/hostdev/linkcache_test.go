package hostdev

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func fakeLink(index int, name string) netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index, Name: name}}
}

func linkEvent(typ uint16, family uint8, l netlink.Link) netlink.LinkUpdate {
	return netlink.LinkUpdate{
		IfInfomsg: nl.IfInfomsg{IfInfomsg: unix.IfInfomsg{Family: family, Index: int32(l.Attrs().Index)}},
		Header:    unix.NlMsghdr{Type: typ},
		Link:      l,
	}
}

func linkNames(links []netlink.Link) []string {
	var out []string
	for _, l := range links {
		out = append(out, l.Attrs().Name)
	}
	return out
}

// TestLinkCache: the cache is what the last dump and the events since say,
// by ifindex; it dumps again when asked fresh, after invalidate and after
// a failed dump, and ignores events while it awaits a dump and events that
// are not a link's whole state (AF_BRIDGE).
func TestLinkCache(t *testing.T) {
	dumps := 0
	kernel := []netlink.Link{fakeLink(1, "lo"), fakeLink(3, "eth1"), fakeLink(2, "eth0")}
	var dumpErr error
	dump := func() ([]netlink.Link, error) {
		dumps++
		return kernel, dumpErr
	}
	c := &linkCache{}
	list := func(fresh bool) []string {
		t.Helper()
		got, err := c.list(dump, fresh)
		if err != nil {
			t.Fatal(err)
		}
		return linkNames(got)
	}
	check := func(what string, got, want []string, wantDumps int) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: links (-want +got):\n%s", what, diff)
		}
		if dumps != wantDumps {
			t.Errorf("%s: %d dumps, want %d", what, dumps, wantDumps)
		}
	}

	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(9, "early"))) // before any dump: ignored
	check("first list", list(false), []string{"lo", "eth1", "eth0"}, 1)
	check("cached", list(false), []string{"lo", "eth0", "eth1"}, 1)

	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(4, "net1")))    // new link
	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(2, "data0")))   // renamed
	c.apply(linkEvent(unix.RTM_DELLINK, unix.AF_UNSPEC, fakeLink(3, "eth1")))    // moved away
	c.apply(linkEvent(unix.RTM_DELLINK, unix.AF_BRIDGE, fakeLink(1, "lo")))      // a bridge port event
	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_BRIDGE, fakeLink(4, "partial"))) // idem
	check("after events", list(false), []string{"lo", "data0", "net1"}, 1)

	check("fresh", list(true), []string{"lo", "eth1", "eth0"}, 2)
	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(5, "net2")))
	c.invalidate()
	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(6, "lost"))) // awaiting a dump: ignored
	check("after invalidate", list(false), []string{"lo", "eth1", "eth0"}, 3)

	dumpErr = errors.New("EINTR")
	if _, err := c.list(dump, true); err == nil {
		t.Fatal("a failed dump was not an error")
	}
	dumpErr = nil
	check("after a failed dump", list(false), []string{"lo", "eth1", "eth0"}, 5)
}

// TestLinkCache_Cached: cached gives the links only while the cache holds
// a dump and the events since, and never dumps itself.
func TestLinkCache_Cached(t *testing.T) {
	c := &linkCache{}
	if _, ok := c.cached(); ok {
		t.Fatal("cached() before any dump = ok")
	}
	if _, err := c.list(func() ([]netlink.Link, error) { return []netlink.Link{fakeLink(2, "eth0"), fakeLink(1, "lo")}, nil }, true); err != nil {
		t.Fatal(err)
	}
	c.apply(linkEvent(unix.RTM_NEWLINK, unix.AF_UNSPEC, fakeLink(3, "eth1")))
	c.apply(linkEvent(unix.RTM_DELLINK, unix.AF_UNSPEC, fakeLink(2, "eth0")))
	got, ok := c.cached()
	names := linkNames(got)
	slices.Sort(names)
	if diff := cmp.Diff([]string{"eth1", "lo"}, names); !ok || diff != "" {
		t.Errorf("cached() = ok %v, links (-want +got):\n%s", ok, diff)
	}
	c.invalidate()
	if _, ok := c.cached(); ok {
		t.Error("cached() after invalidate = ok")
	}
}
