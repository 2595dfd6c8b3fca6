// Package manager is the contract between the provisioner's server and its
// device managers (sr-iov, dummy, host). A manager discovers one class of
// devices and prepares them for claims in the host; moving a prepared
// device into a pod and back is the server's job (package link), the same
// for every manager.
package manager

import (
	"context"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Manager discovers one class of devices and sets them up for claims.
type Manager interface {
	// Run discovers devices until ctx ends. It calls publish with the
	// manager's complete inventory at once and again on every change, never
	// concurrently. It returns nil when ctx ends and an error when it
	// cannot go on.
	Run(ctx context.Context, publish func([]*devicev1.Device)) error
	// Setup prepares dev for a claim with cfg, in the host netns. pool is
	// the pool the device was allocated from (SetupRequest.pool), for
	// managers with per-pool behaviour (the host manager's
	// keepEbpfProgramsPools); it may be empty. The prepared device records
	// everything Free needs to restore the device exactly (original_link,
	// original_vf, link_created). cfg was checked by Validate. On error
	// nothing on the node is left changed.
	Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig, pool string) (*devicev1.PreparedDevice, error)
	// Free undoes Setup, restoring what the prepared device recorded.
	// Idempotent: freeing a freed device is nil.
	Free(ctx context.Context, pd *devicev1.PreparedDevice) error
	// Validate checks the manager-specific fields of cfg for dev before
	// anything is touched, returning a *fielderr.Error naming the field
	// ("config.vlanQoS").
	Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error
}

// RefuseVFSettings returns a *fielderr.Error naming the first setting cfg
// sets that a manager without SR-IOV VFs, called mgr, cannot enforce
// (trust, linkState, minTxRate, maxTxRate), or a bad software VLAN, or
// nil. A field counts as set when it is present, even at its zero value.
//
// vlan, vlanQoS, vlanProto and spoofChk are accepted: the provisioner
// enforces them in software, with eBPF programs on the device in the pod
// (package ebpf), so the same claim config means the same on every
// manager. vlan 0 is no VLAN; vlanQoS (0..7) and vlanProto need a vlan.
func RefuseVFSettings(mgr string, cfg *devicev1.DeviceConfig) error {
	if cfg == nil {
		return nil
	}
	const noVF = "not an SR-IOV VF"
	for _, f := range []struct {
		field string
		set   bool
	}{
		{"trust", cfg.Trust != nil},
		{"linkState", cfg.GetLinkState() != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED},
		{"minTxRate", cfg.MinTxRate != nil},
		{"maxTxRate", cfg.MaxTxRate != nil},
	} {
		if f.set {
			return fielderr.New("config."+f.field, "not supported by the %s manager (%s); only sr-iov devices take it", mgr, noVF)
		}
	}
	return CheckSoftwareVLAN(cfg)
}

// CheckSoftwareVLAN checks the VLAN settings the eBPF programs enforce
// (vlan, vlanQoS, vlanProto), returning a *fielderr.Error naming the
// first bad one ("config.vlan") or nil. A nil cfg is valid.
func CheckSoftwareVLAN(cfg *devicev1.DeviceConfig) error {
	vlan := cfg.GetVlan()
	switch {
	case vlan > 4094:
		return fielderr.New("config.vlan", "%d is out of range 0..4094", vlan)
	case cfg.GetVlanQos() > 7:
		return fielderr.New("config.vlanQoS", "%d is out of range 0..7", cfg.GetVlanQos())
	case cfg.GetVlanQos() != 0 && vlan == 0:
		return fielderr.New("config.vlanQoS", "needs a non-zero vlan")
	case cfg.GetVlanProto() != devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED && vlan == 0:
		return fielderr.New("config.vlanProto", "needs a non-zero vlan")
	}
	if _, ok := devicev1.VlanProto_name[int32(cfg.GetVlanProto())]; !ok {
		return fielderr.New("config.vlanProto", "unknown VLAN protocol %d", cfg.GetVlanProto())
	}
	return nil
}
