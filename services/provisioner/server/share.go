package server

import (
	"regexp"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// shareID is a share ID as the scheduler makes them (a UUID), or any DNS
// label: it names the share's eBPF pin directory (slot).
var shareID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// withShare is dev, the inventory's, set up for share: a device shared by
// bandwidth (bandwidth_capacity set) takes one, any other none. The
// share's bandwidth against the device's capacity is its manager's to
// check (Validate).
func withShare(dev *devicev1.Device, share *devicev1.Share) (*devicev1.Device, error) {
	switch {
	case dev.GetBandwidthCapacity() == 0 && share == nil:
		return dev, nil
	case dev.GetBandwidthCapacity() == 0:
		return nil, fielderr.New("share", "device %s is not shared by bandwidth: it takes no share", dev.GetName())
	case share == nil:
		return nil, fielderr.New("share", "required: device %s is shared by bandwidth, each claim holds a share of it", dev.GetName())
	case !shareID.MatchString(share.GetId()):
		return nil, fielderr.New("share.id", "%q is not a share ID (a UUID: lower-case hex digits and '-', at most 63 characters)", share.GetId())
	}
	dev = proto.CloneOf(dev)
	dev.Share = proto.CloneOf(share)
	return dev, nil
}

// slot names what the server keeps of one prepared device (its eBPF pin
// directory): the device's name, and for a share of a shared device its
// share ID too, "<device>_<share>", so that the shares of one device, each
// its own link in its own pod, never meet. '_' is in no device name (DNS
// labels), so a slot is never another device's; bpffs refuses '.' in a
// name (EPERM).
func slot(pd *devicev1.PreparedDevice) string {
	if id := pd.GetDevice().GetShare().GetId(); id != "" {
		return pd.GetDevice().GetName() + "_" + id
	}
	return pd.GetDevice().GetName()
}
