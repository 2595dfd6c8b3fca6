package hostdev

import (
	"context"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/services/provisioner/rdma"
	"github.com/netdra/netdra/services/provisioner/settingrules"
	"github.com/netdra/netdra/shared/fielderr"
)

// Setup checks that the device's interface is in the host network namespace
// and still one the manager offers (selected by the configuration, no
// default route through it), and records its name, MAC, MTU and up state as
// original_link, what Detach brings it back to. With a hand-off
// (WithHandoff) and unless pool is one that keeps them
// (keepEbpfProgramsPools), it then takes the host's eBPF programs off the
// interface and records them as detached_ebpf_programs, so they do not
// travel into the pod; it changes nothing else: the interface moves into
// the pod at Attach. dev and cfg are checked with Validate first. A missing
// interface is ErrLinkNotFound; one that a default route goes through,
// ErrDefaultRoute; one the configuration no longer selects, ErrNotSelected.
func (m *Manager) Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig, pool string) (*devicev1.PreparedDevice, error) {
	if err := m.Validate(dev, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := dev.GetKernelIfName()
	h, err := m.ns.Dial()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		if netlinkns.IsNotFound(err) {
			return nil, fmt.Errorf("interface %s: %w", name, ErrLinkNotFound)
		}
		return nil, fmt.Errorf("looking up interface %s: %w", name, err)
	}
	if m.describe(l) == nil {
		return nil, fmt.Errorf("interface %s: %w", name, ErrNotSelected)
	}
	links, err := m.hostLinks(h)
	if err != nil {
		return nil, err
	}
	up, err := uplinks(h, links)
	if err != nil {
		return nil, err
	}
	a := l.Attrs()
	if up[a.Index] {
		return nil, fmt.Errorf("interface %s: %w", name, ErrDefaultRoute)
	}
	nodes, err := m.rdmaNodes(dev)
	if err != nil {
		return nil, err
	}
	pd := &devicev1.PreparedDevice{
		Device:      proto.CloneOf(dev),
		DeviceNodes: nodes,
		OriginalLink: &devicev1.LinkSnapshot{
			Name:       a.Name,
			MacAddress: a.HardwareAddr.String(),
			Mtu:        uint32(a.MTU),
			Up:         a.Flags&net.FlagUp != 0,
		},
	}
	// The last step, so a failure leaves nothing to undo (Take puts back
	// what it took when it fails).
	if err := m.takePrograms(ctx, pd, pool); err != nil {
		return nil, err
	}
	m.log.Debug("recorded host interface", "device", dev.GetName(), "interface", name, "ebpfProgramsTaken", len(pd.GetDetachedEbpfPrograms()))
	return pd, nil
}

// hostLinks returns the host's links for Setup's uplink check: those Run's
// link cache holds (the last dump and the link events since: what
// discovery offered the device by), or, when Run does not follow the
// events, a dump. The cache matters on a host with many links (VFs): a
// dump a Setup would be most of the provisioner's garbage in a burst of
// prepares. The device's own link is read afresh by the caller, and the
// default routes by uplinks.
func (m *Manager) hostLinks(h *netlink.Handle) ([]netlink.Link, error) {
	if links, ok := m.links.cached(); ok {
		return links, nil
	}
	links, err := netlinkns.RetryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	return links, nil
}

// rdmaNodes returns the character devices of dev's RDMA device, if it has
// one (rdma.DeviceNodes).
func (m *Manager) rdmaNodes(dev *devicev1.Device) ([]*devicev1.DeviceNode, error) {
	if dev.GetRdmaDevice() == "" {
		return nil, nil
	}
	nodes, err := rdma.DeviceNodes(m.sysfsRoot, m.devRoot, dev.GetRdmaDevice())
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", dev.GetKernelIfName(), err)
	}
	return nodes, nil
}

// Free gives the host back the eBPF programs Setup took off the interface
// (detached_ebpf_programs), logging as warnings those it could not; the
// rest Setup did not change, and the interface is back in the host
// (Detach) or goes back there when its pod's namespace is destroyed.
// Idempotent (a program given back is unpinned, so a second Free finds it
// gone and only warns); it always succeeds.
func (m *Manager) Free(ctx context.Context, pd *devicev1.PreparedDevice) error {
	m.givePrograms(ctx, pd)
	m.log.Debug("freed host interface", "device", pd.GetDevice().GetName(), "interface", pd.GetOriginalLink().GetName())
	return nil
}

// Validate checks that dev is a host device with an interface name and that
// cfg asks nothing a whole host interface cannot do here: the VF settings
// (vlan, vlanQoS, vlanProto, spoofChk, trust, linkState, minTxRate,
// maxTxRate) apply only to SR-IOV VFs. It returns a *fielderr.Error for the
// first bad field ("config.vlan"). The fields every device takes
// (podIfName, macAddress, mtu, addresses, routes) are the link package's to
// check.
func (m *Manager) Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if k := dev.GetManager(); k != devicev1.DeviceManager_DEVICE_MANAGER_HOST {
		return fielderr.New("device.manager", "%v is not the host manager", k)
	}
	if dev.GetKernelIfName() == "" {
		return fielderr.New("device.kernelIfName", "required for a host device")
	}
	return settingrules.RefuseVF("host", cfg)
}
