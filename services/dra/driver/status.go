package driver

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/dra/slicepool"
)

// StatusData is the JSON this driver writes into
// claim.status.devices[].data for each prepared device. It is the
// cluster-side durable record of the device: after a node reboot (or a lost
// state file) the driver rebuilds the allocation from it.
//
//	{
//	  "preparedDevice": { ...netdra.device.v1.PreparedDevice in protojson... },
//	  "config":         { ...netdra.device.v1.DeviceConfig in protojson... }
//	}
//
// preparedDevice is passed as it is to the provisioner's Restore (which
// parses it strictly and checks it); config is the parsed claim config the
// device was set up with (the opaque parameters need not be parsed again,
// and a later change of the class cannot change it). Both use protojson's
// lowerCamelCase field names.
type StatusData struct {
	PreparedDevice json.RawMessage `json:"preparedDevice"`
	Config         json.RawMessage `json:"config,omitempty"`
}

// Condition of a status entry.
const (
	// ConditionReady is True on a prepared device's status entry, and
	// False after a prepare that wrote the entry was rolled back.
	ConditionReady = "Ready"
	// reasonPrepared and reasonRolledBack are the Ready condition's reasons.
	reasonPrepared   = "DevicePrepared"
	reasonRolledBack = "PrepareRolledBack"
)

// encodeStatusData returns the StatusData of pd set up with cfg.
func encodeStatusData(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) ([]byte, error) {
	pdJSON, err := protojson.Marshal(pd)
	if err != nil {
		return nil, fmt.Errorf("serializing prepared device %s: %w", pd.GetDevice().GetName(), err)
	}
	cfgJSON, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("serializing config of %s: %w", pd.GetDevice().GetName(), err)
	}
	// encoding/json compacts raw messages, which takes out the spacing
	// protojson randomizes.
	data, err := json.Marshal(StatusData{PreparedDevice: pdJSON, Config: cfgJSON})
	if err == nil && len(data) > resourceapi.AllocatedDeviceStatusDataMaxLength {
		err = fmt.Errorf("status data of device %s is %d bytes; a claim status entry holds at most %d",
			pd.GetDevice().GetName(), len(data), resourceapi.AllocatedDeviceStatusDataMaxLength)
	}
	return data, err
}

// decodeStatusData splits data into the serialized prepared device (for
// the provisioner's Restore) and the config.
func decodeStatusData(data []byte) (json.RawMessage, *devicev1.DeviceConfig, error) {
	var sd StatusData
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sd); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadStatusData, err)
	}
	if len(sd.PreparedDevice) == 0 || bytes.Equal(sd.PreparedDevice, []byte("null")) {
		return nil, nil, fmt.Errorf("%w: no preparedDevice", ErrBadStatusData)
	}
	if sd.PreparedDevice[0] != '{' {
		return nil, nil, fmt.Errorf("%w: preparedDevice is not a JSON object", ErrBadStatusData)
	}
	cfg := &devicev1.DeviceConfig{}
	if len(sd.Config) > 0 {
		if err := protojson.Unmarshal(sd.Config, cfg); err != nil {
			return nil, nil, fmt.Errorf("%w: config: %v", ErrBadStatusData, err)
		}
	}
	return sd.PreparedDevice, cfg, nil
}

// readyEntry is the status entry of a prepared device: Ready, the
// StatusData, and the network data the pod will see (interface name: the
// config's podIfName, else the kernel name; hardware address: the config's
// MAC, else the device's; IPs: the config's addresses).
func (d *Driver) readyEntry(claim *resourceapi.ResourceClaim, dev deviceRef, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) (resourceapi.AllocatedDeviceStatus, error) {
	data, err := encodeStatusData(pd, cfg)
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

// rolledBackEntry replaces a Ready entry after its prepare was rolled back:
// Ready False, no data, so recovery never restores it.
func (d *Driver) rolledBackEntry(claim *resourceapi.ResourceClaim, dev deviceRef, cause error) resourceapi.AllocatedDeviceStatus {
	return d.entry(claim, dev, metav1.ConditionFalse, reasonRolledBack, cause.Error())
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
