package hostdev

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsGetNsType is the NS_GET_NSTYPE ioctl (_IO(0xb7, 0x3)) that x/sys lacks.
const nsGetNsType = 0xb703

// errNotNetns means a path exists but is not a network namespace.
var errNotNetns = errors.New("not a network namespace")

// nsOpener opens rtnetlink sockets in the host network namespace: the one
// at path, or the calling thread's when path is empty. It opens the path
// anew for every socket, so it holds no file descriptor between calls.
type nsOpener struct{ path string }

// checkNetns returns an nsOpener for the network namespace at path, after
// checking that path is one.
func checkNetns(path string) (nsOpener, error) {
	ns, err := openNetns(path)
	if err != nil {
		return nsOpener{}, err
	}
	ns.Close()
	return nsOpener{path: path}, nil
}

func openNetns(path string) (netns.NsHandle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), fmt.Errorf("opening netns %s: %w", path, err)
	}
	if t, err := unix.IoctlRetInt(int(ns), nsGetNsType); err != nil || t != unix.CLONE_NEWNET {
		ns.Close()
		return netns.None(), fmt.Errorf("opening netns %s: %w", path, errNotNetns)
	}
	return ns, nil
}

// dial opens a rtnetlink socket in the namespace. Only NETLINK_ROUTE:
// without a family list the library also opens XFRM and NETFILTER sockets.
func (o nsOpener) dial() (*netlink.Handle, error) {
	ns := netns.None()
	if o.path != "" {
		var err error
		if ns, err = openNetns(o.path); err != nil {
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

func (o nsOpener) String() string {
	if o.path == "" {
		return "the host netns"
	}
	return "netns " + o.path
}

// lookup returns the link called name, or nil if there is none.
func lookup(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return l, nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// retryDump retries a netlink dump that the kernel interrupted because the
// table changed under it (netlink returns partial results with
// ErrDumpInterrupted).
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		v, err := dump()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 10 {
			continue
		}
		return v, err
	}
}

// handle opens the namespace for a netlink subscription: nil (the calling
// thread's) when the path is empty. The caller closes it with done once the
// subscription is made.
func (o nsOpener) handle() (ns *netns.NsHandle, done func(), err error) {
	if o.path == "" {
		return nil, func() {}, nil
	}
	h, err := openNetns(o.path)
	if err != nil {
		return nil, nil, err
	}
	return &h, func() { h.Close() }, nil
}
