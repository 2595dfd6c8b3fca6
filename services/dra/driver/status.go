package driver

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/services/dra/statusdata"
)

// StatusData is the JSON this driver writes into
// claim.status.devices[].data for each prepared device (statusdata.Data).
type StatusData = statusdata.Data

// Condition of a status entry.
const (
	// ConditionReady is True on a prepared device's status entry; an
	// entry whose Ready is not True is never restored from.
	ConditionReady = "Ready"
	// reasonPrepared is the Ready condition's reason.
	reasonPrepared = "DevicePrepared"
)

// readyEntry is the status entry of a prepared device: Ready, the
// StatusData, and the network data the pod will see (interface name: the
// config's podIfName, else the kernel name; hardware address: the config's
// MAC, else the device's; IPs: the config's addresses).
func (d *Driver) readyEntry(claim *resourceapi.ResourceClaim, dev deviceRef, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) (resourceapi.AllocatedDeviceStatus, error) {
	data, err := statusdata.Encode(pd, cfg)
	if err != nil {
		return resourceapi.AllocatedDeviceStatus{}, err
	}
	e := d.entry(claim, dev, metav1.ConditionTrue, reasonPrepared, "")
	e.Data = &runtime.RawExtension{Raw: data}
	e.NetworkData = networkData(pd, cfg)
	return e, nil
}

// networkData is what the pod will see of a prepared device's network
// (nil when nothing): the interface name (the config's podIfName, else the
// kernel name), the hardware address (the config's MAC, else the
// device's) and the config's addresses.
func networkData(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) *resourceapi.NetworkDeviceData {
	nd := &resourceapi.NetworkDeviceData{
		InterfaceName:   cfg.GetPodIfName(),
		IPs:             cfg.GetAddresses(),
		HardwareAddress: cfg.GetMacAddress(),
	}
	if nd.InterfaceName == "" {
		nd.InterfaceName = pd.GetDevice().GetKernelIfName()
	}
	if nd.HardwareAddress == "" {
		nd.HardwareAddress = pd.GetDevice().GetMacAddress()
	}
	if nd.HardwareAddress == "" {
		nd.HardwareAddress = pd.GetOriginalLink().GetMacAddress()
	}
	if nd.InterfaceName != "" || len(nd.IPs) > 0 || nd.HardwareAddress != "" {
		return nd
	}
	return nil
}

func (d *Driver) entry(claim *resourceapi.ResourceClaim, dev deviceRef, st metav1.ConditionStatus, reason, msg string) resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{
		Driver:  d.name,
		Pool:    slicepool.SlicePool(d.node, dev.pool),
		Device:  dev.device,
		ShareID: dev.shareID,
		Conditions: []metav1.Condition{{
			Type: ConditionReady, Status: st, Reason: reason, Message: truncate(msg, 32768),
			ObservedGeneration: claim.Generation, LastTransitionTime: metav1.NewTime(d.now()),
		}},
	}
}

// readyData returns the data of the claim's Ready entry for the device of
// (netdra's) pool, or nil. The entry names the slice pool.
func (d *Driver) readyData(claim *resourceapi.ResourceClaim, pool, device string) []byte {
	if claim == nil {
		return nil
	}
	sp := slicepool.SlicePool(d.node, pool)
	for _, e := range claim.Status.Devices {
		if e.Driver != d.name || e.Pool != sp || e.Device != device || e.Data == nil || len(e.Data.Raw) == 0 {
			continue
		}
		if c := findCondition(e.Conditions, ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
			return e.Data.Raw
		}
	}
	return nil
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
