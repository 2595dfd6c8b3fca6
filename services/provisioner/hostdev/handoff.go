package hostdev

import (
	"context"

	"github.com/vishvananda/netns"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
)

// WithHandoff makes Setup take the eBPF programs the host attached to an
// interface off it (recorded in the prepared device) before the interface
// goes to a pod, and Free give them back, with h; for the pools the
// configuration lists in keepEbpfProgramsPools, the programs stay on. Without
// it, the programs stay on every interface.
func WithHandoff(h *ebpf.Handoff) Option {
	return func(m *Manager) error {
		m.handoff = h
		return nil
	}
}

// takePrograms is Setup's hand-off step for pd, allocated from pool.
func (m *Manager) takePrograms(ctx context.Context, pd *devicev1.PreparedDevice, pool string) error {
	if m.handoff == nil || m.keep[pool] {
		return nil
	}
	ns, done, err := m.ns.Handle()
	if err != nil {
		return err
	}
	defer done()
	h := netns.None()
	if ns != nil {
		h = *ns
	}
	progs, err := m.handoff.Take(ctx, pd.GetDevice().GetName(), h, pd.GetOriginalLink().GetName())
	if err != nil {
		return err
	}
	pd.DetachedEbpfPrograms = progs
	return nil
}

// givePrograms is Free's hand-off step: it gives back what Setup took, and
// logs (as warnings) what it could not; that does not fail Free, since
// retrying would not bring a lost program back.
func (m *Manager) givePrograms(ctx context.Context, pd *devicev1.PreparedDevice) {
	progs := pd.GetDetachedEbpfPrograms()
	if len(progs) == 0 {
		return
	}
	if m.handoff == nil {
		m.log.Warn("cannot give the host's eBPF programs back: no bpffs configured", "device", pd.GetDevice().GetName(), "programs", len(progs))
		return
	}
	ns, done, err := m.ns.Handle()
	if err != nil {
		m.log.Warn("cannot give the host's eBPF programs back", "device", pd.GetDevice().GetName(), "error", err)
		return
	}
	defer done()
	h := netns.None()
	if ns != nil {
		h = *ns
	}
	m.handoff.Give(ctx, pd.GetDevice().GetName(), h, pd.GetOriginalLink().GetName(), progs)
}
