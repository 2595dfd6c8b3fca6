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
	// Setup prepares dev for a claim with cfg, in the host netns. The
	// prepared device records everything Free needs to restore the device
	// exactly (original_link, original_vf, link_created). cfg was checked
	// by Validate. On error nothing on the node is left changed.
	Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig) (*devicev1.PreparedDevice, error)
	// Free undoes Setup, restoring what the prepared device recorded.
	// Idempotent: freeing a freed device is nil.
	Free(ctx context.Context, pd *devicev1.PreparedDevice) error
	// Validate checks the manager-specific fields of cfg for dev before
	// anything is touched, returning a *fielderr.Error naming the field
	// ("config.vlanQoS").
	Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error
}

// RefuseVFSettings returns a *fielderr.Error naming the first VF-only
// setting cfg sets (vlan, vlanQoS, vlanProto, spoofChk, trust, linkState,
// minTxRate, maxTxRate), for a manager without SR-IOV VFs called mgr, or nil. A field counts as set when it
// is present, even at its zero value (vlan 0 asks to clear a VF's VLAN).
func RefuseVFSettings(mgr string, cfg *devicev1.DeviceConfig) error {
	if cfg == nil {
		return nil
	}
	const (
		noVLAN = "no hardware VLAN"
		noVF   = "not an SR-IOV VF"
	)
	for _, f := range []struct {
		field string
		set   bool
		why   string
	}{
		{"vlan", cfg.Vlan != nil, noVLAN},
		{"vlanQoS", cfg.VlanQos != nil, noVLAN},
		{"vlanProto", cfg.GetVlanProto() != devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED, noVLAN},
		{"spoofChk", cfg.SpoofChk != nil, noVF},
		{"trust", cfg.Trust != nil, noVF},
		{"linkState", cfg.GetLinkState() != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED, noVF},
		{"minTxRate", cfg.MinTxRate != nil, noVF},
		{"maxTxRate", cfg.MaxTxRate != nil, noVF},
	} {
		if f.set {
			return fielderr.New("config."+f.field, "not supported by the %s manager (%s); only sr-iov devices take it", mgr, f.why)
		}
	}
	return nil
}
