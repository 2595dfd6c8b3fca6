package dummy

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/hostns"
)

// createdAlias is the interface alias (IFLA_IFALIAS, `ip link show` prints
// it) that marks a dummy link as created by Setup. It is what tells a link
// Setup created earlier (whose prepared device was lost before the claim
// status recorded it) from a dummy link someone else made, which Setup only
// adopts.
const createdAlias = "netdra:dummy"

// Setup makes the device's dummy link exist in the host network namespace
// and records it in the prepared device:
//
//   - no link of that name: Setup creates a dummy link (down, marked with an
//     alias) and sets link_created, so Free deletes it;
//   - a dummy link Setup created before (it carries the mark): Setup takes it
//     as it is and sets link_created, which makes Setup idempotent;
//   - any other dummy link: Setup adopts it; link_created is false and Free
//     leaves it;
//   - a link that is not a dummy: ErrNotDummy, nothing changed.
//
// In every case original_link is the link's name, MAC, MTU and up state as
// Setup leaves it, what Detach brings the link back to. dev and cfg are
// checked with Validate first. On error nothing is left changed.
func (m *Manager) Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig) (*devicev1.PreparedDevice, error) {
	if err := m.Validate(dev, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := dev.GetKernelIfName()
	log := m.log.With("device", dev.GetName())
	h, err := m.ns.Dial()
	if err != nil {
		return nil, err
	}
	defer h.Close()

	l, err := hostns.Lookup(h, name)
	if err != nil {
		return nil, err
	}
	created := false
	if l == nil {
		if l, created, err = create(h, name); err != nil {
			return nil, err
		}
	}
	if t := l.Type(); t != "dummy" {
		return nil, fmt.Errorf("link %s is a %s: %w", name, t, ErrNotDummy)
	}
	owned := created || l.Attrs().Alias == createdAlias
	pd := &devicev1.PreparedDevice{
		Device:       proto.CloneOf(dev),
		OriginalLink: snapshot(l),
		LinkCreated:  owned,
	}
	switch {
	case created:
		log.Debug("created dummy link", "link", name)
	case owned:
		log.Debug("dummy link was created by an earlier setup; taking it", "link", name)
	default:
		log.Info("adopted an existing dummy link; it stays when the claim is freed", "link", name)
	}
	return pd, nil
}

// create adds the dummy link name, marked as created by Setup, and returns
// it as the kernel has it. If another link of that name appeared since the
// lookup, create returns that one with created false. The kernel ignores an
// alias given at creation, so the mark is set afterwards; if that fails, the
// link is deleted again.
func create(h *netlink.Handle, name string) (l netlink.Link, created bool, err error) {
	err = h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}})
	switch {
	case err == nil:
		created = true
	case errors.Is(err, unix.EEXIST):
	default:
		return nil, false, fmt.Errorf("creating dummy link %s: %w", name, err)
	}
	l, err = hostns.Lookup(h, name)
	if err == nil && l == nil {
		err = fmt.Errorf("dummy link %s vanished after it was created", name)
	}
	if err == nil && created {
		if err = h.LinkSetAlias(l, createdAlias); err != nil {
			err = fmt.Errorf("marking dummy link %s as created by netdra: %w", name, err)
		}
		l.Attrs().Alias = createdAlias
	}
	if err != nil {
		if created {
			if l == nil {
				l = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}
			}
			err = errors.Join(err, deleteLink(h, l))
		}
		return nil, false, err
	}
	return l, created, nil
}

// Free deletes the link Setup created (link_created), found by the name
// original_link records. It leaves an adopted link, and a link of that name
// that is not the one Setup created (not a dummy, or without the mark), in
// place. Idempotent: a link that is gone (deleted by an earlier Free, or
// still in a pod's namespace, which deletes it when it goes) is success.
func (m *Manager) Free(ctx context.Context, pd *devicev1.PreparedDevice) error {
	name := pd.GetOriginalLink().GetName()
	if name == "" {
		name = pd.GetDevice().GetKernelIfName()
	}
	log := m.log.With("device", pd.GetDevice().GetName(), "link", name)
	if !pd.GetLinkCreated() {
		log.Debug("leaving the adopted dummy link in place")
		return nil
	}
	if name == "" {
		return fmt.Errorf("freeing %s: the prepared device names no link", pd.GetDevice().GetName())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := m.ns.Dial()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := hostns.Lookup(h, name)
	switch {
	case err != nil:
		return err
	case l == nil:
		log.Debug("dummy link is gone already")
		return nil
	case l.Type() != "dummy" || l.Attrs().Alias != createdAlias:
		log.Warn("not deleting the link: it is not the dummy link setup created", "type", l.Type(), "alias", l.Attrs().Alias)
		return nil
	}
	if err := deleteLink(h, l); err != nil {
		return err
	}
	log.Debug("deleted dummy link")
	return nil
}

// deleteLink deletes l (by its ifindex, or by its name when the index is
// not known); a link that is gone is success.
func deleteLink(h *netlink.Handle, l netlink.Link) error {
	err := h.LinkDel(l)
	if err != nil && !hostns.IsNotFound(err) {
		return fmt.Errorf("deleting dummy link %s: %w", l.Attrs().Name, err)
	}
	return nil
}

func snapshot(l netlink.Link) *devicev1.LinkSnapshot {
	a := l.Attrs()
	return &devicev1.LinkSnapshot{
		Name:       a.Name,
		MacAddress: a.HardwareAddr.String(),
		Mtu:        uint32(a.MTU),
		Up:         a.Flags&net.FlagUp != 0,
	}
}
