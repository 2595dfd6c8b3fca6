package hostdev

import (
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkCache is the host's links as the last dump and the link events since
// left them, so that a rescan after an event reads memory instead of
// dumping every link of the host again: with hundreds of links a dump
// costs tens of milliseconds of CPU, and the pods' own moves make events
// all the time. A dump refills it at the start, on the periodic resync and
// after a lost subscription (events may be missing).
//
// The dump runs with the cache locked, and the events are applied in the
// order the kernel sent them, so an event newer than the dump is applied
// after it, and an older one, applied after it too, is either the link's
// latest state or followed by a newer event of the same link.
type linkCache struct {
	mu    sync.Mutex
	valid bool
	links map[int32]netlink.Link // by ifindex
}

// apply records a link event. Events of other families (AF_BRIDGE port
// notifications) are not a link's whole state and are left out, as are
// events while the cache awaits a dump.
func (c *linkCache) apply(u netlink.LinkUpdate) {
	if u.Family != unix.AF_UNSPEC || u.Link == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid {
		return
	}
	switch u.Header.Type {
	case unix.RTM_NEWLINK:
		c.links[u.Index] = u.Link
	case unix.RTM_DELLINK:
		delete(c.links, u.Index)
	}
}

// invalidate makes the next list dump.
func (c *linkCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.valid = false
}

// list returns the links, by ifindex: the cached ones, or, when fresh is
// set or the cache is not valid, those dump returns, which refill it. The
// links returned must not be changed.
func (c *linkCache) list(dump func() ([]netlink.Link, error), fresh bool) ([]netlink.Link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && !fresh {
		out := c.copyLocked()
		slices.SortFunc(out, func(a, b netlink.Link) int { return a.Attrs().Index - b.Attrs().Index })
		return out, nil
	}
	links, err := dump()
	if err != nil {
		c.valid = false
		return nil, err
	}
	c.links = make(map[int32]netlink.Link, len(links))
	for _, l := range links {
		c.links[int32(l.Attrs().Index)] = l
	}
	c.valid = true
	return links, nil
}

// cached returns the cached links, in no order, and true; or false when
// the cache awaits a dump (no Run follows the host's events, or its
// subscription was lost), which it leaves to list. The links returned must
// not be changed.
func (c *linkCache) cached() ([]netlink.Link, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid {
		return nil, false
	}
	return c.copyLocked(), true
}

func (c *linkCache) copyLocked() []netlink.Link {
	out := make([]netlink.Link, 0, len(c.links))
	for _, l := range c.links {
		out = append(out, l)
	}
	return out
}
