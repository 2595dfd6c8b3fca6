// Package netlinkns opens rtnetlink sockets in the provisioner's host network
// namespace (or a stand-in for it in tests) and holds the small netlink
// helpers the device managers and the link mover share: opening a network
// namespace file, the host's or a pod's, checked to be one (Open,
// ErrNotNetns), telling a missing link (IsNotFound) and retrying an
// interrupted dump (RetryDump).
package netlinkns

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsGetNsType is the NS_GET_NSTYPE ioctl (_IO(0xb7, 0x3)) that x/sys lacks:
// it returns the CLONE_NEW* type of a namespace file, and fails on any other
// file.
const nsGetNsType = 0xb703

// ErrNotNetns means a path exists but is not a network namespace (for
// example a bind mount that was unmounted, leaving an empty file).
var ErrNotNetns = errors.New("not a network namespace")

// Opener opens rtnetlink sockets in the host network namespace: the one
// at path, or the calling thread's when path is empty. It opens the path
// anew for every socket, so it holds no file descriptor between calls.
type Opener struct{ path string }

// At returns an Opener for path without checking it: the first socket
// opened fails when path is not a network namespace.
func At(path string) Opener { return Opener{path: path} }

// Check returns an Opener for the network namespace at path, after
// checking that path is one.
func Check(path string) (Opener, error) {
	ns, err := Open(path)
	if err != nil {
		return Opener{}, err
	}
	ns.Close()
	return Opener{path: path}, nil
}

// Open opens the network namespace file at path, checking that it is one.
// A path that does not exist fails with an error matching fs.ErrNotExist; a
// file that is not a network namespace, with ErrNotNetns.
func Open(path string) (netns.NsHandle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), fmt.Errorf("opening netns %s: %w", path, err)
	}
	if t, err := unix.IoctlRetInt(int(ns), nsGetNsType); err != nil || t != unix.CLONE_NEWNET {
		ns.Close()
		return netns.None(), fmt.Errorf("opening netns %s: %w", path, ErrNotNetns)
	}
	return ns, nil
}

// Dial opens a rtnetlink socket in the namespace. Only NETLINK_ROUTE:
// without a family list the library also opens XFRM and NETFILTER sockets.
func (o Opener) Dial() (*netlink.Handle, error) {
	ns := netns.None()
	if o.path != "" {
		var err error
		if ns, err = Open(o.path); err != nil {
			return nil, err
		}
		defer ns.Close()
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket in %s: %w", o, err)
	}
	return h, nil
}

func (o Opener) String() string {
	if o.path == "" {
		return "the host netns"
	}
	return "netns " + o.path
}

// Lookup returns the link called name, or nil if there is none.
func Lookup(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		if IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return l, nil
}

// IsNotFound reports whether err says a link does not exist.
func IsNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// RetryDump retries a netlink dump that the kernel interrupted because the
// table changed under it (netlink returns partial results with
// ErrDumpInterrupted).
func RetryDump[T any](dump func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		v, err := dump()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 10 {
			continue
		}
		return v, err
	}
}

// Handle opens the namespace for a netlink subscription: nil (the calling
// thread's) when the path is empty. The caller closes it with done once the
// subscription is made.
func (o Opener) Handle() (ns *netns.NsHandle, done func(), err error) {
	if o.path == "" {
		return nil, func() {}, nil
	}
	h, err := Open(o.path)
	if err != nil {
		return nil, nil, err
	}
	return &h, func() { h.Close() }, nil
}
