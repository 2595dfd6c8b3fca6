package store

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// ReplaceDevices makes req.Devices the whole inventory of req.Manager: new
// and changed rows are written, that manager's missing rows deleted, other
// managers' rows and all allocations left alone. A device that has an
// allocation keeps what discovery no longer sees (a VF's interface name while
// it sits in a pod): the discovered fields are merged over the prepared
// device's. A name another manager already reports is ErrConflict.
func (s *Store) ReplaceDevices(req *statev1.ReplaceDevicesRequest) (*statev1.ReplaceDevicesResponse, error) {
	mgr := req.GetManager()
	if err := validManager("manager", mgr, true); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, d := range req.GetDevices() {
		f := indexed("devices", i)
		if err := validDeviceName(f+".name", d.GetName()); err != nil {
			return nil, err
		}
		if seen[d.GetName()] {
			return nil, fieldErr(f+".name", "%q appears twice", d.GetName())
		}
		seen[d.GetName()] = true
		if m := d.GetManager(); m != devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED && m != mgr {
			return nil, fieldErr(f+".manager", "%s differs from the request's %s", m, mgr)
		}
	}
	rev, err := s.write(func(w *writer) error {
		for _, d := range req.GetDevices() {
			if err := w.replaceDevice(mgr, d); err != nil {
				return err
			}
		}
		for old := range s.devices.List(w.txn, deviceManagerIndex.Query(mgr)) {
			if !seen[old.GetName()] {
				if err := w.deleteDevice(old.Device); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &statev1.ReplaceDevicesResponse{Revision: rev}, nil
}

func (w *writer) replaceDevice(mgr devicev1.DeviceManager, d *devicev1.Device) error {
	d = proto.CloneOf(d)
	d.Manager = mgr
	for a := range w.s.allocs.List(w.txn, allocDevIndex.Query(d.GetName())) {
		if pd := a.GetPreparedDevice().GetDevice(); pd != nil {
			merged := proto.CloneOf(pd)
			proto.Merge(merged, d)
			d = merged
			break
		}
	}
	old, _, found := w.s.devices.Get(w.txn, deviceNameIndex.Query(d.GetName()))
	if found && old.GetManager() != mgr {
		return fmt.Errorf("device %q is reported by manager %s: %w", d.GetName(), old.GetManager(), ErrConflict)
	}
	if found && proto.Equal(old.Device, d) {
		return nil
	}
	return w.putDevice(d)
}

// MaxListNames is the most device names one ListDevices may ask for: a
// claim's devices and its pod's other claims' (32 requests of a claim,
// each at most a few devices, as DRA allows).
const MaxListNames = 128

// ListDevices returns the inventory, of one manager when req.Manager is set,
// in name order; with req.Names, only those devices, in that order.
func (s *Store) ListDevices(req *statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error) {
	if err := validManager("manager", req.GetManager(), false); err != nil {
		return nil, err
	}
	if n := len(req.GetNames()); n > MaxListNames {
		return nil, fielderr.New("names", "%d names, more than %d", n, MaxListNames)
	}
	for i, n := range req.GetNames() {
		if err := validDeviceName(fmt.Sprintf("names[%d]", i), n); err != nil {
			return nil, err
		}
	}
	txn := s.db.ReadTxn()
	out := &statev1.ListDevicesResponse{}
	m := req.GetManager()
	if names := req.GetNames(); len(names) > 0 {
		for _, n := range names {
			r, _, found := s.devices.Get(txn, deviceNameIndex.Query(n))
			if found && (m == devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED || r.Device.GetManager() == m) {
				out.Devices = append(out.Devices, r.Device)
			}
		}
		return out, nil
	}
	rows := s.devices.All(txn)
	if m != devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED {
		rows = s.devices.List(txn, deviceManagerIndex.Query(m))
	}
	for r := range rows {
		out.Devices = append(out.Devices, r.Device)
	}
	return out, nil
}
