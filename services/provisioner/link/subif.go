package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// SubAlias is the interface alias that marks a sub-interface netdra
// created in a pod: what tells it from a link of the same name someone else
// made, which netdra never deletes.
const SubAlias = "netdra:subif"

// ErrParentNotFound means a sub-interface's parent is not in the host
// namespace.
var ErrParentNotFound = errors.New("parent interface not found")

// CreateSub makes the sub-interface sub (a macvlan, ipvlan or VLAN link
// on the host link sub.ParentIfName) directly inside the network namespace
// at netnsPath, with one RTM_NEWLINK sent in the host namespace that names
// the pod's namespace (IFLA_NET_NS_FD) and the parent (IFLA_LINK): the
// kernel creates the link there, so nothing moves, the parent least of
// all. The link is named cfg.PodIfName (empty: orig.Name), gets cfg's MAC
// (empty: orig's, for a macvlan or a VLAN link; an ipvlan always has its
// parent's) and MTU (empty: the kernel's, its parent's), is marked with
// SubAlias, then gets its addresses, up, and its routes, as Create does,
// and, with sub.EgressRate set, a token bucket holding its egress to that
// rate (shapeEgress).
// cfg must have passed Validate and the manager's checks (an MTU above the
// parent's still fails here, naming both).
//
// CreateSub is idempotent: a link it made there already under the pod name
// is configured again. A pod name held by any other link is ErrNameClash,
// a missing parent ErrParentNotFound, both with nothing changed. Any other
// failure deletes the link again. The host namespace is never changed.
func (m *Mover) CreateSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	want, base, err := parseCreate(ctx, orig, cfg)
	if err != nil {
		return err
	}
	if want.mac == nil && sub.GetKind() != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN {
		want.mac = base.mac
	}
	podName := cmp.Or(cfg.GetPodIfName(), orig.GetName())
	host, pod, done, err := m.dialHostAndPod(netnsPath)
	if err != nil {
		return err
	}
	defer done()
	l, again, err := m.placeSub(host, pod, sub, podName, want, cfg)
	if err == nil {
		err = configure(pod, l, want)
	}
	if err == nil {
		err = pod.shapeEgress(l, sub.GetEgressRate())
	}
	log := m.log.With("link", podName, "netns", netnsPath, "parent", sub.GetParentIfName())
	if err == nil {
		log.Debug("sub-interface created in the pod", "again", again)
		return nil
	}
	err = fmt.Errorf("creating %s sub-interface %s of %s in %s: %w", kindName(sub), podName, sub.GetParentIfName(), netnsPath, err)
	if l == nil {
		return err
	}
	if derr := errors.Join(pod.del(l), pod.unpod(want)); derr != nil {
		log.Error("deleting the sub-interface after a failed create", "error", err, "deleteError", derr)
		return errors.Join(err, derr)
	}
	log.Warn("create failed; sub-interface deleted", "error", err)
	return err
}

// placeSub finds the sub-interface CreateSub made before under podName in
// pod (again), or creates it, down, with want's MAC and MTU. On an error
// it returns the link only when it must be deleted.
func (m *Mover) placeSub(host, pod *conn, sub *devicev1.SubInterface, podName string, want config, cfg *devicev1.DeviceConfig) (netlink.Link, bool, error) {
	l, err := pod.lookup(podName)
	switch {
	case err != nil:
		return nil, false, err
	case l != nil && !isSub(l, sub):
		return nil, false, fmt.Errorf("%s is another %s link: %w", podName, l.Type(), ErrNameClash)
	case l != nil:
		return l, true, pod.setL2Down(l, want.mac, want.mtu)
	}
	parent, err := host.lookup(sub.GetParentIfName())
	switch {
	case err != nil:
		return nil, false, err
	case parent == nil:
		return nil, false, fmt.Errorf("%s in the host: %w", sub.GetParentIfName(), ErrParentNotFound)
	case want.mtu > parent.Attrs().MTU:
		return nil, false, fmt.Errorf("MTU %d is larger than the parent %s's MTU %d", want.mtu, sub.GetParentIfName(), parent.Attrs().MTU)
	}
	nl, err := newSub(sub, parent.Attrs().Index, podName, want, cfg)
	if err != nil {
		return nil, false, err
	}
	nl.Attrs().Namespace = netlink.NsFd(int(pod.ns))
	if err := host.h.LinkAdd(nl); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: %w", ErrNameClash, err)
		}
		return nil, false, fmt.Errorf("adding %s link: %w", kindName(sub), err)
	}
	if l, err = pod.link(podName); err != nil {
		return nil, false, err
	}
	if err := pod.h.LinkSetAlias(l, SubAlias); err != nil {
		return l, false, fmt.Errorf("marking %s as created by netdra: %w", podName, err)
	}
	l.Attrs().Alias = SubAlias
	return l, false, nil
}

// newSub is the link to create for sub on the parent with ifindex parent.
func newSub(sub *devicev1.SubInterface, parent int, name string, want config, cfg *devicev1.DeviceConfig) (netlink.Link, error) {
	a := netlink.NewLinkAttrs()
	a.Name, a.ParentIndex, a.MTU = name, parent, want.mtu
	if sub.GetKind() != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN {
		a.HardwareAddr = want.mac
	}
	switch sub.GetKind() {
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN:
		mode, ok := macvlanModes[sub.GetMode()]
		if !ok {
			return nil, fmt.Errorf("%v is not a macvlan mode", sub.GetMode())
		}
		return &netlink.Macvlan{LinkAttrs: a, Mode: mode}, nil
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN:
		mode, ok := ipvlanModes[sub.GetMode()]
		if !ok {
			return nil, fmt.Errorf("%v is not an ipvlan mode", sub.GetMode())
		}
		return &netlink.IPVlan{LinkAttrs: a, Mode: mode, Flag: netlink.IPVLAN_FLAG_BRIDGE}, nil
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		return newVlan(a, sub, cfg)
	}
	return nil, fmt.Errorf("%v is not a sub-interface kind", sub.GetKind())
}

// newVlan is a VLAN link with sub's VLAN ID, cfg's protocol, and cfg's
// priority (vlanQoS) on every frame the pod sends (skb priorities 0..7).
func newVlan(a netlink.LinkAttrs, sub *devicev1.SubInterface, cfg *devicev1.DeviceConfig) (netlink.Link, error) {
	id := sub.GetVlanId()
	if id < 1 || id > 4094 {
		return nil, fmt.Errorf("VLAN ID %d is out of range 1..4094", id)
	}
	v := &netlink.Vlan{LinkAttrs: a, VlanId: int(id), VlanProtocol: netlink.VLAN_PROTOCOL_8021Q}
	if cfg.GetVlanProto() == devicev1.VlanProto_VLAN_PROTO_8021AD {
		v.VlanProtocol = netlink.VLAN_PROTOCOL_8021AD
	}
	if q := cfg.GetVlanQos(); q != 0 {
		v.EgressQosMap = map[uint32]uint32{}
		for prio := range uint32(8) {
			v.EgressQosMap[prio] = q
		}
	}
	return v, nil
}

var macvlanModes = map[devicev1.SubInterfaceMode]netlink.MacvlanMode{
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_UNSPECIFIED:      netlink.MACVLAN_MODE_BRIDGE,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE:   netlink.MACVLAN_MODE_BRIDGE,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PRIVATE:  netlink.MACVLAN_MODE_PRIVATE,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_VEPA:     netlink.MACVLAN_MODE_VEPA,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU: netlink.MACVLAN_MODE_PASSTHRU,
}

var ipvlanModes = map[devicev1.SubInterfaceMode]netlink.IPVlanMode{
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_UNSPECIFIED: netlink.IPVLAN_MODE_L2,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L2:   netlink.IPVLAN_MODE_L2,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3:   netlink.IPVLAN_MODE_L3,
	devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S:  netlink.IPVLAN_MODE_L3S,
}

// kindName is the kernel's name of sub's kind ("macvlan").
func kindName(sub *devicev1.SubInterface) string { return SubKindName(sub.GetKind()) }

// SubKindName is the kernel's name of a sub-interface kind ("macvlan").
func SubKindName(k devicev1.SubInterfaceKind) string {
	switch k {
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN:
		return "macvlan"
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN:
		return "ipvlan"
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		return "vlan"
	}
	return fmt.Sprintf("kind %d", k)
}

// isSub reports whether l is a link CreateSub made for sub: of its kind,
// marked.
func isSub(l netlink.Link, sub *devicev1.SubInterface) bool {
	return l.Type() == kindName(sub) && l.Attrs().Alias == SubAlias
}

// RemoveSub deletes the sub-interface CreateSub made in the network
// namespace at netnsPath: the link called cfg.PodIfName (empty: orig.Name),
// if it is of sub's kind and carries the mark. Nothing moves and the host
// namespace is not touched. Idempotent: no such link, or a netns that is
// gone (the kernel deletes a sub-interface with its namespace, and with
// its parent), is success; a link of that name CreateSub did not make is
// left alone, with a warning.
func (m *Mover) RemoveSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	return m.removeCreated(ctx, orig, netnsPath, cfg, "sub-interface", func(l netlink.Link) bool { return isSub(l, sub) })
}
