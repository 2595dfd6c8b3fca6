package subif

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/fielderr"
)

// ErrParentNotFound means a device's parent interface is not in the host
// network namespace (now).
var ErrParentNotFound = errors.New("parent interface not found in the host netns")

// Setup prepares a sub-interface for a claim without touching the node:
// the link is made later, directly inside the pod's network namespace,
// when the device is attached (link.Mover.CreateSub). Setup checks that
// the parent is there and still offered (no default route through it
// unless allowed) and that the claim's MTU is no larger than the parent's
// (config.mtu otherwise), then records what the link will be: the
// prepared device's sub_interface with the VLAN ID the link gets (the
// entry's, or the claim's vlan), and original_link with the link's default
// name in the pod, its MAC (a random locally administered one for a
// macvlan, so that the claim status names the address the pod will see;
// the parent's for the kinds that take it) and the parent's MTU;
// link_created is set. dev and cfg are checked with Validate first. A
// missing parent is ErrParentNotFound; one a default route goes through,
// hostdev.ErrDefaultRoute.
func (m *Manager) Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig, _ string) (*devicev1.PreparedDevice, error) {
	if err := m.Validate(dev, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, _ := m.offerOf(dev.GetName())
	mtu, parentMAC, err := m.parent(o)
	if err != nil {
		return nil, err
	}
	if cfg.GetMtu() > uint32(mtu) {
		return nil, fielderr.New("config.mtu", "%d is larger than the MTU of the parent %s (%d)", cfg.GetMtu(), o.sub.GetParentIfName(), mtu)
	}
	mac := parentMAC
	if takesMAC(o.sub) {
		if mac, err = link.RandomMAC(); err != nil {
			return nil, err
		}
	}
	pd := &devicev1.PreparedDevice{
		Device:       proto.CloneOf(dev),
		OriginalLink: &devicev1.LinkSnapshot{Name: dev.GetKernelIfName(), MacAddress: mac.String(), Mtu: uint32(mtu)},
		LinkCreated:  true,
	}
	pd.Device.SubInterface.VlanId = cmp.Or(o.sub.GetVlanId(), cfg.GetVlan())
	pd.Device.SubInterface.EgressRate = dev.GetShare().GetBandwidth()
	m.log.Debug("prepared sub-interface; its link is created in the pod at attach", "device", dev.GetName(),
		"parent", o.sub.GetParentIfName(), "kind", link.SubKindName(o.sub.GetKind()), "mac", mac)
	return pd, nil
}

// parent looks o's parent up: its MTU and MAC. It must be there and
// offered.
func (m *Manager) parent(o *offer) (int, net.HardwareAddr, error) {
	h, err := m.ns.Dial()
	if err != nil {
		return 0, nil, err
	}
	defer h.Close()
	name := o.sub.GetParentIfName()
	l, err := netlinkns.Lookup(h, name)
	if err != nil {
		return 0, nil, err
	}
	if l == nil {
		return 0, nil, fmt.Errorf("parent %s: %w", name, ErrParentNotFound)
	}
	if !o.allowDefaultRoute {
		links, err := netlinkns.RetryDump(h.LinkList)
		if err != nil {
			return 0, nil, fmt.Errorf("listing links: %w", err)
		}
		up, err := hostdev.Uplinks(h, links)
		if err != nil {
			return 0, nil, err
		}
		if up[l.Attrs().Index] {
			return 0, nil, fmt.Errorf("parent %s (allowDefaultRoute is not set): %w", name, hostdev.ErrDefaultRoute)
		}
	}
	return l.Attrs().MTU, l.Attrs().HardwareAddr, nil
}

// takesMAC reports whether sub's link gets a MAC of its own: a macvlan
// other than passthru (which takes its parent's). An ipvlan has its
// parent's; a VLAN link starts with its parent's.
func takesMAC(sub *devicev1.SubInterface) bool {
	return sub.GetKind() == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN &&
		sub.GetMode() != devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU
}

// Free has nothing to undo: Setup changed nothing on the node, and the
// link lives in the pod, where Detach deletes it (or the kernel does, with
// the pod's namespace or the parent). Idempotent; it always succeeds.
func (m *Manager) Free(_ context.Context, pd *devicev1.PreparedDevice) error {
	m.log.Debug("freed sub-interface", "device", pd.GetDevice().GetName())
	return nil
}

// offerOf returns the entry that offers the device called name.
func (m *Manager) offerOf(name string) (*offer, bool) {
	if o, ok := m.byName[name]; ok && o.shared() {
		return o, true
	}
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return nil, false
	}
	o, ok := m.byName[name[:i]]
	if !ok || o.shared() {
		return nil, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 || n >= o.count || o.deviceName(n) != name {
		return nil, false
	}
	return o, true
}
