package sriov

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// netlinkLinks is pfLinks over rtnetlink in the host network namespace (the
// namespace of the calling thread; the provisioner never leaves one of its
// threads in another). Each call opens its own socket, so a Manager holds no
// resources between calls and needs no Close.
type netlinkLinks struct{}

var _ pfLinks = netlinkLinks{}

// dial opens a rtnetlink socket. Only NETLINK_ROUTE: without a family list
// the library also opens XFRM and NETFILTER sockets, which can fail.
func dial() (*netlink.Handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	return h, nil
}

// pfLink looks up the PF pf, with its VF list.
func pfLink(h *netlink.Handle, pf string) (netlink.Link, error) {
	l, err := h.LinkByName(pf)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("PF %s: %w", pf, ErrPFNotFound)
		}
		return nil, fmt.Errorf("looking up PF %s: %w", pf, err)
	}
	return l, nil
}

func (netlinkLinks) VF(pf string, vf int) (vfState, error) {
	h, err := dial()
	if err != nil {
		return vfState{}, err
	}
	defer h.Close()
	l, err := pfLink(h, pf)
	if err != nil {
		return vfState{}, err
	}
	vfs := l.Attrs().Vfs
	if vf < 0 || vf >= len(vfs) {
		return vfState{}, fmt.Errorf("VF %d on %s (it has %d): %w", vf, pf, len(vfs), ErrVFNotFound)
	}
	v := vfs[vf]
	return vfState{
		MAC:       v.Mac,
		Vlan:      uint32(v.Vlan),
		Qos:       uint32(v.Qos),
		Proto:     uint16(v.VlanProto),
		SpoofChk:  v.Spoofchk,
		Trust:     v.Trust != 0, // a driver without trust reports -1: true
		LinkState: v.LinkState,
		MinTxRate: v.MinTxRate,
		MaxTxRate: v.MaxTxRate,
	}, nil
}

func (netlinkLinks) SetVF(pf string, vf int, s setting, want vfState) error {
	h, err := dial()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := pfLink(h, pf)
	if err != nil {
		return err
	}
	switch s {
	case settingVlan:
		// IFLA_VF_VLAN is 802.1Q and works with every driver; the
		// IFLA_VF_VLAN_LIST form is only needed for another protocol,
		// which some drivers (ixgbe) refuse outright.
		if normProto(want.Proto) == protoAD {
			return h.LinkSetVfVlanQosProto(l, vf, int(want.Vlan), int(want.Qos), int(protoAD))
		}
		return h.LinkSetVfVlanQos(l, vf, int(want.Vlan), int(want.Qos))
	case settingMAC:
		return h.LinkSetVfHardwareAddr(l, vf, want.MAC)
	case settingSpoofChk:
		return h.LinkSetVfSpoofchk(l, vf, want.SpoofChk)
	case settingTrust:
		return h.LinkSetVfTrust(l, vf, want.Trust)
	case settingLinkState:
		return h.LinkSetVfState(l, vf, want.LinkState)
	case settingRate:
		return h.LinkSetVfRate(l, vf, int(want.MinTxRate), int(want.MaxTxRate))
	}
	return fmt.Errorf("unknown VF setting %d", s)
}

func (netlinkLinks) Link(name string) (*devicev1.LinkSnapshot, error) {
	h, err := dial()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	a := l.Attrs()
	return &devicev1.LinkSnapshot{
		Name:       a.Name,
		MacAddress: a.HardwareAddr.String(),
		Mtu:        uint32(a.MTU),
		Up:         a.Flags&net.FlagUp != 0,
	}, nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// subscribeFunc starts delivering the link changes of the host network
// namespace on the returned channel until done is closed. The channel is
// closed when the subscription ends (done, or a socket error such as a
// receive buffer overrun); the caller must drain it until then.
type subscribeFunc func(done <-chan struct{}) (<-chan netlink.LinkUpdate, error)

// subscribeLinks is the real subscribeFunc.
func subscribeLinks(log *slog.Logger) subscribeFunc {
	return func(done <-chan struct{}) (<-chan netlink.LinkUpdate, error) {
		ch := make(chan netlink.LinkUpdate, 64)
		err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) { log.Debug("Link event subscription", "error", err) },
		})
		if err != nil {
			return nil, fmt.Errorf("subscribing to link events: %w", err)
		}
		return ch, nil
	}
}
