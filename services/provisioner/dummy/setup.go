package dummy

import (
	"context"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/link"
)

// defaultMTU is a dummy link's MTU when the kernel creates it (ETH_DATA_LEN).
const defaultMTU = 1500

// Setup prepares a dummy device for a claim without touching the node: the
// link is made later, directly inside the pod's network namespace, when the
// device is attached (link.Mover.Create), so it never moves between
// namespaces. Setup records in the prepared device what that link will be:
// original_link holds its name (the device's), a MAC address chosen now (a
// random locally administered unicast one, so that the claim status names
// the address the pod will see and a spoof check has one to enforce) and
// the kernel's default MTU; link_created is set, which tells the provisioner
// to create and delete the link rather than move it.
//
// A link of the device's name in the host namespace (a dummy someone else
// made, or anything else) is no concern of Setup's: the pod's link lives in
// the pod's namespace, so the two never clash, and the host's stays as it
// is. dev and cfg are checked with Validate first; Setup is idempotent in
// effect (nothing is made until Attach).
func (m *Manager) Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig, _ string) (*devicev1.PreparedDevice, error) {
	if err := m.Validate(dev, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mac, err := link.RandomMAC()
	if err != nil {
		return nil, err
	}
	m.log.Debug("prepared dummy device; its link is created in the pod at attach", "device", dev.GetName(), "mac", mac)
	return &devicev1.PreparedDevice{
		Device:       proto.CloneOf(dev),
		OriginalLink: &devicev1.LinkSnapshot{Name: dev.GetKernelIfName(), MacAddress: mac.String(), Mtu: defaultMTU},
		LinkCreated:  true,
	}, nil
}

// Free has nothing to undo: Setup changed nothing on the node, and the
// device's link lives in the pod, where Detach deletes it (or the kernel
// does, with the pod's namespace). Idempotent; it always succeeds.
func (m *Manager) Free(_ context.Context, pd *devicev1.PreparedDevice) error {
	m.log.Debug("freed dummy device", "device", pd.GetDevice().GetName())
	return nil
}
