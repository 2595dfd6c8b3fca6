package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// createdInPod reports whether pd's link is made inside the pod at Attach
// and deleted there at Detach instead of moved: link_created, which the
// dummy manager sets. Namespace moves are serialized by the kernel's RTNL
// and are the expensive step of an attach, so a dummy device skips them;
// an SR-IOV VF or a host interface moves once in and once out.
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
// says: created there, or moved there from the host (one move), after its
// RDMA device if it has one (attachRDMA).
func (s *Server) attachLink(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if sub := pd.GetDevice().GetSubInterface(); sub != nil {
		return s.createSub(ctx, sub, createdOrig(pd), netnsPath, cfg)
	}
	if createdInPod(pd) {
		return s.mover.Create(ctx, createdOrig(pd), netnsPath, cfg)
	}
	return s.attachRDMA(ctx, pd, netnsPath, func() error {
		return s.mover.Attach(ctx, pd.GetDevice().GetKernelIfName(), pd.GetOriginalLink(), netnsPath, cfg)
	})
}

// attachRDMA moves pd's RDMA device into the pod (in the exclusive RDMA
// netns mode; the mover does nothing in shared mode), then runs
// attachNetdev. The RDMA device goes first: a device the kernel cannot
// move (soft-RoCE) is refused before the netdev's costly move, with
// nothing changed; and when the netdev cannot follow, the RDMA device is
// taken back, so a failed Attach leaves both where Setup left them.
func (s *Server) attachRDMA(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, attachNetdev func() error) error {
	dev := pd.GetDevice().GetRdmaDevice()
	if dev == "" {
		return attachNetdev()
	}
	if err := s.mover.AttachRDMA(ctx, dev, netnsPath); err != nil {
		return err
	}
	err := attachNetdev()
	if err == nil {
		return nil
	}
	if rerr := s.mover.DetachRDMA(context.WithoutCancel(ctx), dev, netnsPath); rerr != nil {
		s.log.Error("taking the RDMA device back after its netdev could not follow", "device", pd.GetDevice().GetName(), "rdmaDevice", dev, "error", err, "restoreError", rerr)
		return errors.Join(err, fmt.Errorf("taking RDMA device %s back to the host: %w", dev, rerr))
	}
	return err
}

// detachLink takes pd's link out of the pod at netnsPath: deleted there, or
// moved back to the host (one move), then its RDMA device. A Detach that
// fails after the link is back is finished by calling it again (both moves
// are idempotent).
func (s *Server) detachLink(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if sub := pd.GetDevice().GetSubInterface(); sub != nil {
		return s.removeSub(ctx, sub, createdOrig(pd), netnsPath, cfg)
	}
	if createdInPod(pd) {
		return s.mover.Remove(ctx, createdOrig(pd), netnsPath, cfg)
	}
	if err := s.mover.Detach(ctx, pd.GetOriginalLink(), netnsPath, cfg); err != nil {
		return err
	}
	if dev := pd.GetDevice().GetRdmaDevice(); dev != "" {
		return s.mover.DetachRDMA(ctx, dev, netnsPath)
	}
	return nil
}

// readSettings reads, before Setup, what the host link of a device that
// moves whole (a host interface, a VF's netdev) has of the link settings
// cfg asks: what Detach sets back, kept in the prepared device's
// original_link. A link made in the pod has nothing to set back: nil.
func (s *Server) readSettings(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig) (*devicev1.LinkSettings, error) {
	switch dev.GetManager() {
	case devicev1.DeviceManager_DEVICE_MANAGER_HOST, devicev1.DeviceManager_DEVICE_MANAGER_SRIOV:
	default:
		return nil, nil
	}
	if dev.GetKernelIfName() == "" || cfg.GetLinkSettings() == nil {
		return nil, nil
	}
	return s.mover.ReadSettings(ctx, dev.GetKernelIfName(), cfg.GetLinkSettings())
}
