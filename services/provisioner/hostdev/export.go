package hostdev

import (
	"context"
	"log/slog"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// What the host manager knows of host links, for the other managers of
// host links (subif, whose parents are host interfaces): the same rule for
// the uplink, the same health, the same events.

// Uplinks returns the ifindexes of the links a default route of the host
// goes through (see uplinks): the links no claim may take.
func Uplinks(h *netlink.Handle, links []netlink.Link) (map[int]bool, error) {
	return uplinks(h, links)
}

// LinkState is what a link's flags and operational state say of its
// health (see linkState).
func LinkState(a *netlink.LinkAttrs) devicev1.LinkState { return linkState(a) }

// Waiter is a watch's goroutines: Wait returns once they are gone, after
// the watch's context ended.
type Waiter interface{ Wait() }

// Watch signals changed (without blocking) on every link event and every
// default-route event in the host namespace ns opens, subscribing again
// when the kernel ends a subscription, until ctx ends. It fails only when
// the first subscriptions cannot be made; the Waiter is then non-nil when
// some goroutine started.
func Watch(ctx context.Context, log *slog.Logger, ns netlinkns.Opener, changed chan<- struct{}) (Waiter, error) {
	m := &Manager{log: log, ns: ns}
	w, err := m.watch(ctx, changed, nil)
	if w == nil {
		return nil, err
	}
	return w, err
}
