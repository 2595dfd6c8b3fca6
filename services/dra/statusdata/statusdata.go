// Package statusdata is the JSON that dra writes into a claim's
// status.devices[].data for each prepared device, and reads back to
// restore the device after a node reboot or a lost state file. It links
// no Kubernetes package, so that its fuzz target builds without them.
package statusdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// MaxLength is the most bytes a claim status entry's data holds
// (resource.k8s.io/v1 AllocatedDeviceStatusDataMaxLength; dra's tests check
// that they agree).
const MaxLength = 10 * 1024

// ErrBad: a claim status entry's data is not in the Data format.
var ErrBad = errors.New("claim status data is not a netdra prepared device")

// Data is the JSON dra writes into
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
type Data struct {
	PreparedDevice json.RawMessage `json:"preparedDevice"`
	Config         json.RawMessage `json:"config,omitempty"`
}

// Encode returns the Data of pd set up with cfg.
func Encode(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) ([]byte, error) {
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
	data, err := json.Marshal(Data{PreparedDevice: pdJSON, Config: cfgJSON})
	if err == nil && len(data) > MaxLength {
		err = fmt.Errorf("status data of device %s is %d bytes; a claim status entry holds at most %d",
			pd.GetDevice().GetName(), len(data), MaxLength)
	}
	return data, err
}

// Decode splits data into the serialized prepared device (for
// the provisioner's Restore) and the config.
func Decode(data []byte) (json.RawMessage, *devicev1.DeviceConfig, error) {
	var sd Data
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sd); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBad, err)
	}
	if len(sd.PreparedDevice) == 0 || bytes.Equal(sd.PreparedDevice, []byte("null")) {
		return nil, nil, fmt.Errorf("%w: no preparedDevice", ErrBad)
	}
	if sd.PreparedDevice[0] != '{' {
		return nil, nil, fmt.Errorf("%w: preparedDevice is not a JSON object", ErrBad)
	}
	cfg := &devicev1.DeviceConfig{}
	if len(sd.Config) > 0 {
		if err := protojson.Unmarshal(sd.Config, cfg); err != nil {
			return nil, nil, fmt.Errorf("%w: config: %v", ErrBad, err)
		}
	}
	return sd.PreparedDevice, cfg, nil
}
