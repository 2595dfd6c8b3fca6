package hostdev

import (
	"net"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// linkState is what a link's flags and operational state say of its
// health: administratively down (not in use), up, or up with no carrier
// (down, lower layer down, not present). A link whose driver reports no
// operational state (unknown, as a dummy or a tun does) counts as up while
// it is administratively up.
func linkState(a *netlink.LinkAttrs) devicev1.LinkState {
	if a.Flags&net.FlagUp == 0 {
		return devicev1.LinkState_LINK_STATE_ADMIN_DOWN
	}
	switch a.OperState {
	case netlink.OperDown, netlink.OperLowerLayerDown, netlink.OperNotPresent:
		return devicev1.LinkState_LINK_STATE_DOWN
	}
	return devicev1.LinkState_LINK_STATE_UP
}
