package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// CreatedAlias is the interface alias (IFLA_IFALIAS, `ip link show` prints
// it) that marks a link netdra created: what tells a dummy link Create made
// from a link of the same name someone else made, which netdra never
// deletes.
const CreatedAlias = "netdra:dummy"

func newDummy(a netlink.LinkAttrs) netlink.Link { return &netlink.Dummy{LinkAttrs: a} }

// WithVirtualKind makes Create and Remove work with the links newLink
// returns (given their name, MAC and MTU) instead of dummy links. Tests on
// a kernel without the dummy module (the hosts here) use it to stand in a
// link of the same shape, an ifb link.
func WithVirtualKind(newLink func(netlink.LinkAttrs) netlink.Link) Option {
	return func(m *Mover) error {
		if newLink == nil {
			return errors.New("no virtual link kind")
		}
		m.virtual = newLink
		return nil
	}
}

// Create makes a device's virtual link (a dummy link) directly inside the
// network namespace at netnsPath, so that it never moves between
// namespaces, and configures it as cfg says: named cfg.PodIfName (empty:
// orig.Name), with cfg.MacAddress and cfg.Mtu (empty: orig's) set as the
// link is created, marked with CreatedAlias, then its addresses, up, and its
// routes. cfg must have passed Validate (Create trusts it; a value that does
// not parse still fails before anything is touched).
//
// Create is idempotent: a link it made (a link of its kind carrying the
// mark) already there under the pod name is configured again. A pod name
// held by any other link is ErrNameClash, with nothing changed. Any other
// failure deletes the link again, so the pod is left without it, as it was.
// The host namespace is never touched.
func (m *Mover) Create(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	want, base, err := parseCreate(ctx, orig, cfg)
	if err != nil {
		return err
	}
	if want.mac == nil {
		want.mac = base.mac
	}
	want.mtu = cmp.Or(want.mtu, base.mtu)
	pod, err := m.dialPod(netnsPath)
	if err != nil {
		return err
	}
	defer pod.Close()
	podName := cmp.Or(cfg.GetPodIfName(), orig.GetName())
	log := m.log.With("link", podName, "netns", netnsPath)

	l, err := pod.lookup(podName)
	if err != nil {
		return err
	}
	again := l != nil
	switch {
	case again && !m.created(l):
		return fmt.Errorf("creating %s in %s: %s is another %s link: %w", podName, netnsPath, podName, l.Type(), ErrNameClash)
	case again:
		err = pod.setL2Down(l, want.mac, want.mtu)
	default:
		l, err = m.add(pod, podName, want.mac, want.mtu)
		if err != nil {
			return fmt.Errorf("creating %s in %s: %w", podName, netnsPath, err)
		}
	}
	if err == nil {
		err = configure(pod, l, want)
	}
	if err == nil {
		log.Debug("created in the pod", "again", again)
		return nil
	}
	err = fmt.Errorf("creating %s in %s: %w", podName, netnsPath, err)
	if derr := errors.Join(pod.del(l), pod.unpod(want)); derr != nil {
		log.Error("deleting the link after a failed create", "error", err, "deleteError", derr)
		return errors.Join(err, derr)
	}
	log.Warn("create failed; link deleted", "error", err)
	return err
}

// Remove deletes the link Create made for a device in the network
// namespace at netnsPath: the link called cfg.PodIfName (empty:
// orig.Name), if it is of Create's kind and carries the mark. Nothing
// moves and the host namespace is not touched.
//
// Remove is idempotent: no link of that name (removed already, or never
// created), or a netns that is gone (the kernel deletes a virtual link with
// its namespace), is success. A link of that name that Create did not make
// is left alone, with a warning, and is success too: the device is not in
// the pod. cfg must have passed Validate.
func (m *Mover) Remove(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	return m.removeCreated(ctx, orig, netnsPath, cfg, "link", m.created)
}

// parseCreate is Create's and CreateSub's first step: the config and the
// snapshot in netlink's terms, unless ctx has ended.
func parseCreate(ctx context.Context, orig *devicev1.LinkSnapshot, cfg *devicev1.DeviceConfig) (config, state, error) {
	want, err := parseConfig(cfg)
	if err != nil {
		return config{}, state{}, err
	}
	base, err := parseSnapshot(orig)
	if err != nil {
		return config{}, state{}, err
	}
	return want, base, ctx.Err()
}

// removeCreated deletes the link of a created device (what, for the logs)
// in the pod at netnsPath, when ours says netdra made it: Remove's and
// RemoveSub's shared steps.
func (m *Mover) removeCreated(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig, what string, ours func(netlink.Link) bool) error {
	podName := cfg.GetPodIfName()
	if podName == "" {
		if err := validateSnapshot(orig); err != nil {
			return err
		}
		podName = orig.GetName()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	log := m.log.With("link", podName, "netns", netnsPath)
	pod, err := m.dialPod(netnsPath)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, netlinkns.ErrNotNetns) {
		log.Debug("netns is gone, and the "+what+" with it", "reason", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer pod.Close()
	l, err := pod.lookup(podName)
	switch {
	case err != nil:
		return err
	case l == nil:
		log.Debug("removed already")
		return unpodCfg(pod, cfg)
	case !ours(l):
		log.Warn("not deleting the link: netdra did not create it", "type", l.Type(), "alias", l.Attrs().Alias)
		return nil
	}
	if err := pod.del(l); err != nil {
		return fmt.Errorf("removing %s from %s: %w", podName, netnsPath, err)
	}
	if err := unpodCfg(pod, cfg); err != nil {
		return fmt.Errorf("removing %s from %s: %w", podName, netnsPath, err)
	}
	log.Debug(what + " removed from the pod")
	return nil
}

// unpodCfg is unpod for cfg, which passed Validate.
func unpodCfg(pod *conn, cfg *devicev1.DeviceConfig) error {
	want, err := parseConfig(cfg)
	if err != nil {
		return err
	}
	return pod.unpod(want)
}

// created reports whether l is a link Create made: of its kind, marked.
func (m *Mover) created(l netlink.Link) bool {
	return l.Type() == m.kind && l.Attrs().Alias == CreatedAlias
}

// add creates the virtual link name in c, down, with mac and mtu (nil, 0:
// the kernel's), and marks it. A name taken meanwhile is ErrNameClash. The
// kernel ignores an alias given at creation, so the mark is set afterwards;
// if that fails, the link is deleted again.
func (m *Mover) add(c *conn, name string, mac net.HardwareAddr, mtu int) (netlink.Link, error) {
	if err := c.h.LinkAdd(m.virtual(netlink.LinkAttrs{Name: name, HardwareAddr: mac, MTU: mtu})); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: %w", ErrNameClash, err)
		}
		return nil, fmt.Errorf("adding %s link: %w", m.kind, err)
	}
	l, err := c.link(name)
	if err != nil {
		return nil, err
	}
	if err := c.h.LinkSetAlias(l, CreatedAlias); err != nil {
		err = fmt.Errorf("marking %s as created by netdra: %w", name, err)
		return nil, errors.Join(err, c.del(l))
	}
	l.Attrs().Alias = CreatedAlias
	return l, nil
}

// setL2Down sets l's MAC and MTU where they differ from mac and mtu,
// setting it down first when one does (see setL2).
func (c *conn) setL2Down(l netlink.Link, mac net.HardwareAddr, mtu int) error {
	a := l.Attrs()
	if (mac == nil || a.HardwareAddr.String() == mac.String()) && (mtu == 0 || a.MTU == mtu) {
		return nil
	}
	if err := c.setDown(l); err != nil {
		return err
	}
	return c.setL2(l, mac, mtu)
}

// del deletes l; a link that is gone is success.
func (c *conn) del(l netlink.Link) error {
	if err := c.h.LinkDel(l); err != nil && !netlinkns.IsNotFound(err) {
		return fmt.Errorf("deleting %s in %s: %w", l.Attrs().Name, c.name, err)
	}
	return nil
}
