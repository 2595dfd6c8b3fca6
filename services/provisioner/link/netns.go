package link

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// conn is a rtnetlink socket opened inside one network namespace, so that no
// thread of ours ever has to switch namespace to talk to it (the library
// switches one locked thread only while it creates the socket).
type conn struct {
	log   *slog.Logger
	name  string         // "host" or the netns path, for errors and logs
	ns    netns.NsHandle // what IFLA_NET_NS_FD gets when a link moves here
	h     *netlink.Handle
	ownNs bool // whether Close closes ns
}

// dial opens a rtnetlink socket in ns. Only NETLINK_ROUTE: without a family
// list the library also opens XFRM and NETFILTER sockets, which fail here.
func dial(log *slog.Logger, name string, ns netns.NsHandle, ownNs bool) (*conn, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		if ownNs {
			ns.Close()
		}
		return nil, fmt.Errorf("netlink socket in %s: %w", name, err)
	}
	return &conn{log: log, name: name, ns: ns, h: h, ownNs: ownNs}, nil
}

// Close releases the socket and, when the conn owns it, the netns fd.
func (c *conn) Close() {
	c.h.Close()
	if c.ownNs {
		c.ns.Close()
	}
}

// link looks a link up by name; a missing one is ErrLinkNotFound.
func (c *conn) link(name string) (netlink.Link, error) {
	l, err := c.h.LinkByName(name)
	if err != nil {
		if netlinkns.IsNotFound(err) {
			return nil, fmt.Errorf("link %s in %s: %w", name, c.name, ErrLinkNotFound)
		}
		return nil, fmt.Errorf("looking up %s in %s: %w", name, c.name, err)
	}
	return l, nil
}

// lookup is link without the error for a missing link: it returns nil, nil.
func (c *conn) lookup(name string) (netlink.Link, error) {
	l, err := c.link(name)
	if errors.Is(err, ErrLinkNotFound) {
		return nil, nil
	}
	return l, err
}

// free reports whether no link but the one with ifindex self is called name.
// self is 0 when the caller's link is not in this namespace.
func (c *conn) free(name string, self int) (bool, error) {
	l, err := c.lookup(name)
	if err != nil {
		return false, err
	}
	return l == nil || l.Attrs().Index == self, nil
}

// claim fails with ErrNameClash unless name is free for the link self.
func (c *conn) claim(name string, self int) error {
	ok, err := c.free(name, self)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s in %s is another link: %w", name, c.name, ErrNameClash)
	}
	return nil
}

// setDown sets l administratively down if it is up.
func (c *conn) setDown(l netlink.Link) error {
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 {
		return nil
	}
	if err := c.h.LinkSetDown(l); err != nil {
		return fmt.Errorf("setting %s down in %s: %w", a.Name, c.name, err)
	}
	a.Flags &^= net.FlagUp
	return nil
}

// setUp sets l administratively up if it is down.
func (c *conn) setUp(l netlink.Link) error {
	a := l.Attrs()
	if a.Flags&net.FlagUp != 0 {
		return nil
	}
	if err := c.h.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %s up in %s: %w", a.Name, c.name, err)
	}
	a.Flags |= net.FlagUp
	return nil
}

// setL2 sets l's MAC and MTU where they differ from mac and mtu; a nil mac
// or a zero mtu leaves that one. l should be down: some drivers refuse a MAC
// change on a running link (EBUSY).
func (c *conn) setL2(l netlink.Link, mac net.HardwareAddr, mtu int) error {
	a := l.Attrs()
	if mac != nil && a.HardwareAddr.String() != mac.String() {
		if err := c.h.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("setting MAC of %s to %s in %s: %w", a.Name, mac, c.name, err)
		}
		a.HardwareAddr = mac
	}
	if mtu != 0 && a.MTU != mtu {
		if err := c.h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("setting MTU of %s to %d in %s: %w", a.Name, mtu, c.name, err)
		}
		a.MTU = mtu
	}
	return nil
}

// rename renames l (down) to name. EEXIST is ErrNameClash.
func (c *conn) rename(l netlink.Link, name string) error {
	a := l.Attrs()
	if a.Name == name {
		return nil
	}
	if err := c.h.LinkSetName(l, name); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: %w", ErrNameClash, err)
		}
		return fmt.Errorf("renaming %s to %s in %s: %w", a.Name, name, c.name, err)
	}
	a.Name = name
	return nil
}

// tempName returns a random interface name for a link to cross namespaces
// under when both its current and its final name are taken on the other
// side.
func tempName() string {
	return fmt.Sprintf("%s%08x", tempPrefix, rand.Uint32())
}
