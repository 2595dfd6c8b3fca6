package link

// RDMA devices and network namespaces. The kernel's RDMA subsystem has two
// netns modes (`rdma system set netns shared|exclusive`, RDMA netlink
// RDMA_NLDEV_CMD_SYS_SET): in shared mode, the default, every namespace
// sees every RDMA device and nothing moves; in exclusive mode an RDMA
// device belongs to one namespace, and a pod can use its netdev's RDMA
// device only once it has been moved there (RDMA_NLDEV_CMD_SET with
// RDMA_NLDEV_NET_NS_FD), beside the netdev, which moves on its own. The
// kernel returns an RDMA device to the initial namespace when its
// namespace dies.
//
// This is the one place the link package switches a thread's namespace:
// the kernel moves an RDMA device only for a sender whose own namespace
// (current->nsproxy->net_ns) is the device's, whatever the socket's, so
// the request is sent from a locked thread switched into the source
// namespace (inNetns).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// The RDMA netns modes, as RDMA netlink names them.
const (
	RDMAShared    = "shared"
	RDMAExclusive = "exclusive"
)

// rdmaConn is an RDMA netlink socket opened inside one network namespace.
type rdmaConn struct {
	name  string         // "host" or the netns path
	ns    netns.NsHandle // what RDMA_NLDEV_NET_NS_FD gets to move a device here
	h     *netlink.Handle
	ownNs bool
}

// dialRDMA opens an RDMA netlink socket in ns (ib_core must be loaded).
func dialRDMA(name string, ns netns.NsHandle, ownNs bool) (*rdmaConn, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_RDMA)
	if err != nil {
		if ownNs {
			ns.Close()
		}
		return nil, fmt.Errorf("RDMA netlink socket in %s: %w", name, err)
	}
	return &rdmaConn{name: name, ns: ns, h: h, ownNs: ownNs}, nil
}

func (c *rdmaConn) Close() {
	c.h.Close()
	if c.ownNs {
		c.ns.Close()
	}
}

// device returns the RDMA device called name if this namespace sees it,
// else nil.
func (c *rdmaConn) device(name string) (*netlink.RdmaLink, error) {
	devs, err := netlinkns.RetryDump(c.h.RdmaLinkList)
	if err != nil {
		return nil, fmt.Errorf("listing RDMA devices in %s: %w", c.name, err)
	}
	for _, d := range devs {
		if d.Attrs.Name == name {
			return d, nil
		}
	}
	return nil, nil
}

// RDMANetnsMode returns the kernel's RDMA netns mode, RDMAShared or
// RDMAExclusive.
func (m *Mover) RDMANetnsMode() (string, error) {
	host, err := dialRDMA("host", m.hostNs, false)
	if err != nil {
		return "", err
	}
	defer host.Close()
	return host.mode()
}

func (c *rdmaConn) mode() (string, error) {
	mode, err := c.h.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("reading the RDMA netns mode: %w", err)
	}
	return mode, nil
}

// AttachRDMA moves the RDMA device dev from the host into the pod network
// namespace at netnsPath, in the exclusive RDMA netns mode; in shared mode
// it changes nothing (the pod sees the device already). It is idempotent:
// a device already in the pod is success. A device in neither is
// ErrRDMANotFound; one whose driver cannot move (soft-RoCE, rdma_rxe: no
// disassociate_ucontext) ErrRDMANotMovable. On failure nothing has moved.
func (m *Mover) AttachRDMA(ctx context.Context, dev, netnsPath string) error {
	host, err := m.exclusiveHost(ctx)
	if host == nil {
		return err // or shared: every namespace sees the device
	}
	defer host.Close()
	pod, err := m.dialRDMAPod(netnsPath)
	if err != nil {
		return err
	}
	defer pod.Close()
	if err := moveRDMA(host, pod, dev); err != nil {
		return fmt.Errorf("attaching RDMA device %s to %s: %w", dev, netnsPath, err)
	}
	m.log.Debug("RDMA device attached", "rdmaDevice", dev, "netns", netnsPath)
	return nil
}

// DetachRDMA moves the RDMA device dev from the pod network namespace at
// netnsPath back to the host, in the exclusive RDMA netns mode; in shared
// mode it changes nothing. It is idempotent: a device in the host is
// success, and so is a netns that is gone (the kernel returned the device
// to the initial namespace). A device in neither is ErrRDMANotFound.
func (m *Mover) DetachRDMA(ctx context.Context, dev, netnsPath string) error {
	host, err := m.exclusiveHost(ctx)
	if host == nil {
		return err // or shared: nothing moved
	}
	defer host.Close()
	pod, err := m.dialRDMAPod(netnsPath)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, netlinkns.ErrNotNetns) {
		m.log.Debug("netns is gone; the kernel returns its RDMA devices", "rdmaDevice", dev, "netns", netnsPath)
		return nil
	}
	if err != nil {
		return err
	}
	defer pod.Close()
	if err := moveRDMA(pod, host, dev); err != nil {
		return fmt.Errorf("detaching RDMA device %s from %s: %w", dev, netnsPath, err)
	}
	m.log.Debug("RDMA device detached", "rdmaDevice", dev, "netns", netnsPath)
	return nil
}

// exclusiveHost opens an RDMA netlink socket in the host netns when the
// kernel is in the exclusive RDMA netns mode (RDMA devices move); nil and
// no error in shared mode, where nothing moves.
func (m *Mover) exclusiveHost(ctx context.Context) (*rdmaConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	host, err := dialRDMA("host", m.hostNs, false)
	if err != nil {
		return nil, err
	}
	if mode, err := host.mode(); err != nil || mode != RDMAExclusive {
		host.Close()
		return nil, err
	}
	return host, nil
}

// dialRDMAPod opens the pod network namespace at path and an RDMA netlink
// socket in it.
func (m *Mover) dialRDMAPod(path string) (*rdmaConn, error) {
	ns, err := m.openPod(path)
	if err != nil {
		return nil, err
	}
	return dialRDMA(path, ns, true)
}

// moveRDMA moves the RDMA device name from src's namespace into dst's; one
// already in dst is done.
func moveRDMA(src, dst *rdmaConn, name string) error {
	d, err := src.device(name)
	if err != nil {
		return err
	}
	if d == nil {
		there, err := dst.device(name)
		switch {
		case err != nil:
			return err
		case there != nil:
			return nil
		}
		return fmt.Errorf("%s is in neither %s nor %s: %w", name, src.name, dst.name, ErrRDMANotFound)
	}
	err = inNetns(src.ns, func() error { return src.h.RdmaLinkSetNsFd(d, uint32(dst.ns)) })
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("moving %s from %s to %s: its driver cannot give up its user contexts: %w: %w", name, src.name, dst.name, ErrRDMANotMovable, err)
	}
	if err != nil {
		return fmt.Errorf("moving %s from %s to %s: %w", name, src.name, dst.name, err)
	}
	return nil
}

// inNetns runs f on a new locked OS thread switched into ns and waits for
// it. The thread is never reused: it stays locked when its goroutine ends,
// so the runtime retires it, whether or not it could switch back.
func inNetns(ns netns.NsHandle, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("switching a thread into the namespace: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}
