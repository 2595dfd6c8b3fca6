package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
)

// SubMover creates sub-interfaces (macvlan, ipvlan, VLAN links of a host
// parent) directly inside pod network namespaces and deletes them there;
// *link.Mover is one. A Mover that is not one cannot attach sub-interface
// devices.
type SubMover interface {
	CreateSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	RemoveSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
}

var _ SubMover = (*link.Mover)(nil)

// createSub creates a sub-interface device's link in the pod: no
// namespace move, the parent untouched. A parent that is gone
// (link.ErrParentNotFound) is FailedPrecondition (linkStatus): the device
// is down until it is back.
func (s *Server) createSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	sm, ok := s.mover.(SubMover)
	if !ok {
		return status.Error(codes.Unimplemented, "this provisioner's mover cannot create sub-interfaces")
	}
	return sm.CreateSub(ctx, sub, orig, netnsPath, cfg)
}

// removeSub deletes a sub-interface device's link in the pod.
func (s *Server) removeSub(ctx context.Context, sub *devicev1.SubInterface, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	sm, ok := s.mover.(SubMover)
	if !ok {
		return status.Error(codes.Unimplemented, "this provisioner's mover cannot remove sub-interfaces")
	}
	return sm.RemoveSub(ctx, sub, orig, netnsPath, cfg)
}

// softwareConfig is the part of cfg the eBPF programs enforce on pd's
// device: all of it, except on a VLAN sub-interface, whose vlan, vlanQoS
// and vlanProto are the link's own (the kernel tags its frames), not a tag
// for the programs to push.
func softwareConfig(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) *devicev1.DeviceConfig {
	if pd.GetDevice().GetSubInterface().GetKind() != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN || cfg == nil {
		return cfg
	}
	cfg = proto.CloneOf(cfg)
	cfg.Vlan, cfg.VlanQos, cfg.VlanProto = nil, nil, devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED
	return cfg
}

// validateSub checks the sub-interface a prepared device records (what a
// claim status may hold after a restart): a known kind, a mode of that
// kind, a parent's interface name, and a VLAN link's ID in 1..4094. A nil
// sub is valid (not a sub-interface).
func validateSub(field string, sub *devicev1.SubInterface) error {
	if sub == nil {
		return nil
	}
	mode := sub.GetMode()
	unspecified := mode == devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_UNSPECIFIED
	switch sub.GetKind() {
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN:
		if !unspecified && (mode < devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE || mode > devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU) {
			return fielderr.New(field+".mode", "%v is not a macvlan mode", mode)
		}
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN:
		if !unspecified && (mode < devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L2 || mode > devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S) {
			return fielderr.New(field+".mode", "%v is not an ipvlan mode", mode)
		}
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		if !unspecified {
			return fielderr.New(field+".mode", "a VLAN link has no mode, not %v", mode)
		}
		if id := sub.GetVlanId(); id < 1 || id > 4094 {
			return fielderr.New(field+".vlanId", "%d is out of range 1..4094", id)
		}
	default:
		return fielderr.New(field+".kind", "unknown sub-interface kind %v", sub.GetKind())
	}
	if sub.GetParentIfName() == "" {
		return fielderr.New(field+".parentIfName", "required")
	}
	if err := claimconfig.ValidateIfName(field+".parentIfName", sub.GetParentIfName()); err != nil {
		return err
	}
	return nil
}

// buildSubif builds the subif manager, which a provisioner built without
// its factory (tests of the other managers) does not have.
func (ms *managers) buildSubif(cfg *provisionerv1.SubifConfig) (manager.Manager, error) {
	if ms.new.Subif == nil {
		return nil, fielderr.New("enabled", "this provisioner has no subif manager")
	}
	return ms.new.Subif(cfg)
}
