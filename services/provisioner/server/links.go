package server

import (
	"context"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// createdInPod reports whether pd's link is made inside the pod at Attach
// and deleted there at Detach instead of moved: link_created, which the
// dummy manager sets. A namespace move holds the kernel's RTNL lock for
// about 16 ms, so a dummy device costs none; an SR-IOV VF or a host
// interface moves once in and once out.
func createdInPod(pd *devicev1.PreparedDevice) bool {
	return pd.GetLinkCreated()
}

// createdOrig is what a created link is made from: original_link, named
// after the device's kernel name when it records none (a prepared device
// dra had to guess).
func createdOrig(pd *devicev1.PreparedDevice) *devicev1.LinkSnapshot {
	orig := pd.GetOriginalLink()
	if orig.GetName() != "" {
		return orig
	}
	if orig == nil {
		return &devicev1.LinkSnapshot{Name: pd.GetDevice().GetKernelIfName()}
	}
	orig = proto.CloneOf(orig)
	orig.Name = pd.GetDevice().GetKernelIfName()
	return orig
}

// attachLink puts pd's link into the pod at netnsPath, configured as cfg
// says: created there, or moved there from the host (one move).
func (s *Server) attachLink(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if sub := pd.GetDevice().GetSubInterface(); sub != nil {
		return s.createSub(ctx, sub, createdOrig(pd), netnsPath, cfg)
	}
	if createdInPod(pd) {
		return s.mover.Create(ctx, createdOrig(pd), netnsPath, cfg)
	}
	return s.mover.Attach(ctx, pd.GetDevice().GetKernelIfName(), pd.GetOriginalLink(), netnsPath, cfg)
}

// detachLink takes pd's link out of the pod at netnsPath: deleted there, or
// moved back to the host (one move).
func (s *Server) detachLink(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if sub := pd.GetDevice().GetSubInterface(); sub != nil {
		return s.removeSub(ctx, sub, createdOrig(pd), netnsPath, cfg)
	}
	if createdInPod(pd) {
		return s.mover.Remove(ctx, createdOrig(pd), netnsPath, cfg)
	}
	return s.mover.Detach(ctx, pd.GetOriginalLink(), netnsPath, cfg)
}
