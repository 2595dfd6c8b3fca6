// Package manager is the contract between the provisioner's server and its
// device managers (sr-iov, dummy, host). A manager discovers one class of
// devices and prepares them for claims in the host; moving a prepared
// device into a pod and back is the server's job (package link), the same
// for every manager. The bounds of the managers' rescans are here too.
package manager

import (
	"context"
	"errors"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
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

// ErrNotReady is wrapped by an error about a device that is not usable yet
// but is about to be, such as a VF whose driver is registering its netdev
// again (sriov.NotReady): the server answers codes.Unavailable, which its
// callers retry.
var ErrNotReady = errors.New("device not ready yet")
