package store

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// TestListDevices_Names: ListDevices with names returns those devices in
// that order, leaves out a name the inventory does not hold and one of
// another manager when a manager is given, and refuses a bad name naming
// it; without names it returns the whole inventory in name order.
func TestListDevices_Names(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dummy, host := devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, devicev1.DeviceManager_DEVICE_MANAGER_HOST
	if _, err := s.ReplaceDevices(&statev1.ReplaceDevicesRequest{Manager: dummy, Devices: []*devicev1.Device{{Name: "d0", Manager: dummy}, {Name: "d1", Manager: dummy}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplaceDevices(&statev1.ReplaceDevicesRequest{Manager: host, Devices: []*devicev1.Device{{Name: "eth1", Manager: host}}}); err != nil {
		t.Fatal(err)
	}
	names := func(req *statev1.ListDevicesRequest) []string {
		t.Helper()
		resp, err := s.ListDevices(req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range resp.GetDevices() {
			out = append(out, d.GetName())
		}
		return out
	}
	for _, tc := range []struct {
		req  *statev1.ListDevicesRequest
		want []string
	}{
		{&statev1.ListDevicesRequest{}, []string{"d0", "d1", "eth1"}},
		{&statev1.ListDevicesRequest{Names: []string{"eth1", "d0", "gone"}}, []string{"eth1", "d0"}},
		{&statev1.ListDevicesRequest{Names: []string{"eth1", "d1"}, Manager: dummy}, []string{"d1"}},
	} {
		if got := names(tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("ListDevices(%v) = %q, want %q", tc.req, got, tc.want)
		}
	}
	if _, err := s.ListDevices(&statev1.ListDevicesRequest{Names: []string{"d0", "../x"}}); err == nil || !strings.Contains(err.Error(), "names[1]") {
		t.Errorf("ListDevices with a bad name: %v, want an error naming names[1]", err)
	}
}
