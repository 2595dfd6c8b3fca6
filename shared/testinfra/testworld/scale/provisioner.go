package scale

import (
	"context"
	"fmt"
	"os"
	"sync"

	"google.golang.org/grpc"

	"github.com/netdra/netdra/bench/fakesysfs"
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/sriov"
)

// Inventory returns the simulated node's devices as the provisioner's
// sr-iov manager discovers them: pfs SR-IOV PFs with vfsPerPF VFs each
// (bound to iavf, each PF on a PCIe root of its own), read from a fake
// sysfs tree by the manager's own discovery. Every simulated node serves
// the same devices (the names are per node in the API, by the node's
// pools).
func Inventory(pfs, vfsPerPF int) ([]*devicev1.Device, error) {
	root, err := os.MkdirTemp("", "netdra-scale-sysfs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	if err := fakesysfs.Write(root, pfs, vfsPerPF); err != nil {
		return nil, err
	}
	devs, err := sriov.Discover(root)
	if err != nil {
		return nil, fmt.Errorf("discovering the fake sysfs tree: %w", err)
	}
	if len(devs) != pfs*vfsPerPF {
		return nil, fmt.Errorf("the fake sysfs tree gave %d devices, want %d", len(devs), pfs*vfsPerPF)
	}
	return devs, nil
}

// fakeProvisioner is the provisioner's device side as dra sees it:
// Configure turns the sr-iov manager on or off, WatchDevices streams its
// inventory (the fixed devices while on, none while off) at every change.
// It sets up nothing: no claim is prepared on a simulated node.
type fakeProvisioner struct {
	provisionerv1.UnimplementedProvisionerServiceServer
	devices []*devicev1.Device

	mu      sync.Mutex
	sriov   bool
	changed chan struct{}
}

func newFakeProvisioner(devices []*devicev1.Device) *fakeProvisioner {
	return &fakeProvisioner{devices: devices, changed: make(chan struct{})}
}

func (p *fakeProvisioner) Configure(_ context.Context, req *provisionerv1.ConfigureRequest) (*provisionerv1.ConfigureResponse, error) {
	on := req.GetManagers().GetSriov().GetEnabled()
	p.mu.Lock()
	if on != p.sriov {
		p.sriov = on
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
	resp := &provisionerv1.ConfigureResponse{}
	if on {
		resp.Managers = []*provisionerv1.ManagerStatus{{Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, Running: true}}
	}
	return resp, nil
}

func (p *fakeProvisioner) WatchDevices(_ *provisionerv1.WatchDevicesRequest, s grpc.ServerStreamingServer[provisionerv1.WatchDevicesResponse]) error {
	sent := false
	var last bool
	for {
		p.mu.Lock()
		on, changed := p.sriov, p.changed
		p.mu.Unlock()
		if !sent || on != last {
			var devs []*devicev1.Device
			if on {
				devs = p.devices
			}
			if err := s.Send(&provisionerv1.WatchDevicesResponse{Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, Devices: devs}); err != nil {
				return err
			}
			sent, last = true, on
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-changed:
		}
	}
}
