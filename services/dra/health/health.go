// Package health reports the health of dra's devices to the kubelet
// (kubeletplugin.DRAPlugin.WatchHealthStatus) from what the provisioner's
// managers see, as the state service has it: a device whose link is up (or
// that has no link to watch, a dummy before Setup or a vfio-bound VF) is
// Healthy; one whose link is administratively up but has no carrier is
// Unhealthy; one that vanished from the inventory is Unhealthy, unless an
// allocation says it sits in a pod's network namespace, where the host
// cannot see it: that one is Unknown.
package health

import (
	"cmp"
	"context"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/dra/slicepool"
)

// Source is the view health is judged from; *publish.Publisher is one.
type Source interface {
	// View returns the current view and a channel closed at its next
	// change.
	View() (publish.View, <-chan struct{})
}

var _ Source = (*publish.Publisher)(nil)

// DefaultResend is how often an unchanged report is sent again: well
// within the kubelet's default health check timeout (30 s), after which it
// reports a device's health as unknown.
const DefaultResend = 10 * time.Second

// Messages of the reports, for people reading the kubelet's view.
const (
	MsgUp         = "link up"
	MsgNoLink     = "present; it has no link to watch"
	MsgAdminDown  = "present; link administratively down (not in use)"
	MsgNoCarrier  = "link down: no carrier"
	MsgVanished   = "vanished from the node's inventory"
	MsgInPod      = "in a pod's network namespace: its link is not visible from the host"
	MsgUnknownLnk = "link state not understood"
)

// Watcher serves WatchHealthStatus from a Source.
type Watcher struct {
	src    Source
	node   string
	resend time.Duration
	now    func() time.Time
}

// New returns a watcher of node's src that re-sends an unchanged report
// every resend (DefaultResend when not positive).
func New(src Source, node string, resend time.Duration) *Watcher {
	if resend <= 0 {
		resend = DefaultResend
	}
	return &Watcher{src: src, node: node, resend: resend, now: time.Now}
}

// WatchHealthStatus implements the kubelet plugin's health stream: nothing
// until the view is synced, then a report of every device, again at every
// change of a device's health and every resend interval. It returns nil
// when ctx ends. Each call keeps its own memory of the devices it
// reported, so a device that vanishes is reported as such.
func (w *Watcher) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	seen := map[string]string{}
	var last []kubeletplugin.DeviceHealth
	tick := time.NewTicker(w.resend)
	defer tick.Stop()
	resend := false
	for {
		v, changed := w.src.View()
		if v.Synced {
			devs := Assess(v, w.node, seen)
			if resend || last == nil || !sameHealth(last, devs) {
				now := w.now()
				for i := range devs {
					devs[i].LastUpdated = now
				}
				select {
				case <-ctx.Done():
					return nil
				case reports <- kubeletplugin.DeviceHealthReport{Devices: devs}:
				}
				last, resend = devs, false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
			resend = true
		}
	}
}

// Assess judges every device the kubelet may know of, sorted by pool and
// name: those published, those allocated (in the allocation's pool), and
// those in seen (device name -> pool, the devices reported before) that
// vanished since. seen is updated to the devices assessed. A report names
// a device's slice pool (slicepool.SlicePool of node), as the claim's
// result the kubelet matches it against does.
func Assess(v publish.View, node string, seen map[string]string) []kubeletplugin.DeviceHealth {
	pool := map[string]string{}
	for name, p := range seen {
		if _, present := v.Devices[name]; !present {
			pool[name] = p
		}
	}
	for name, p := range v.Pools {
		pool[name] = p
	}
	attached := map[string]bool{}
	for _, a := range v.Allocations {
		pool[a.GetDeviceName()] = a.GetPool()
		if a.GetPhase() == statev1.Phase_PHASE_ATTACHED {
			attached[a.GetDeviceName()] = true
		}
	}
	clear(seen)
	out := make([]kubeletplugin.DeviceHealth, 0, len(pool))
	for name, p := range pool {
		seen[name] = p
		h := kubeletplugin.DeviceHealth{PoolName: slicepool.SlicePool(node, p), DeviceName: name}
		dev, present := v.Devices[name]
		switch {
		case present:
			h.Health, h.Message = linkHealth(dev.GetLinkState())
		case attached[name]:
			h.Health, h.Message = kubeletplugin.HealthStatusUnknown, MsgInPod
		default:
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, MsgVanished
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b kubeletplugin.DeviceHealth) int {
		return cmp.Or(cmp.Compare(a.PoolName, b.PoolName), cmp.Compare(a.DeviceName, b.DeviceName))
	})
	return out
}

func linkHealth(s devicev1.LinkState) (kubeletplugin.HealthStatus, string) {
	switch s {
	case devicev1.LinkState_LINK_STATE_UP:
		return kubeletplugin.HealthStatusHealthy, MsgUp
	case devicev1.LinkState_LINK_STATE_UNSPECIFIED:
		return kubeletplugin.HealthStatusHealthy, MsgNoLink
	case devicev1.LinkState_LINK_STATE_ADMIN_DOWN:
		return kubeletplugin.HealthStatusHealthy, MsgAdminDown
	case devicev1.LinkState_LINK_STATE_DOWN:
		return kubeletplugin.HealthStatusUnhealthy, MsgNoCarrier
	}
	return kubeletplugin.HealthStatusUnknown, MsgUnknownLnk
}

// sameHealth compares two reports, ignoring when they were made.
func sameHealth(a, b []kubeletplugin.DeviceHealth) bool {
	return slices.EqualFunc(a, b, func(x, y kubeletplugin.DeviceHealth) bool {
		return x.PoolName == y.PoolName && x.DeviceName == y.DeviceName && x.Health == y.Health && x.Message == y.Message
	})
}
