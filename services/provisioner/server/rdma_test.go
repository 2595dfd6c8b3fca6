package server

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/shared/fielderr"
)

// failingMover is the recording mover whose step fail fails as the link
// package would.
type failingMover struct {
	fakeMover
	fail string
}

func (f failingMover) Attach(ctx context.Context, ifName string, orig *devicev1.LinkSnapshot, netns string, cfg *devicev1.DeviceConfig) error {
	f.fakeMover.Attach(ctx, ifName, orig, netns, cfg)
	if f.fail == "attach" {
		return link.ErrNameClash
	}
	return nil
}

func (f failingMover) AttachRDMA(ctx context.Context, dev, netns string) error {
	f.fakeMover.AttachRDMA(ctx, dev, netns)
	if f.fail == "attachRDMA" {
		return link.ErrRDMANotMovable
	}
	return nil
}

func rdmaPrepared() *devicev1.PreparedDevice {
	return &devicev1.PreparedDevice{
		Device:       &devicev1.Device{Name: "ens5", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "ens5", RdmaDevice: "mlx5_0"},
		OriginalLink: &devicev1.LinkSnapshot{Name: "ens5"},
		DeviceNodes:  []*devicev1.DeviceNode{{HostPath: "/dev/infiniband/uverbs0", Path: "/dev/infiniband/uverbs0"}},
	}
}

// TestAttachDetach_RDMA: a device with an RDMA device has it moved before
// its netdev at Attach and after it at Detach; an RDMA device the kernel
// cannot move fails Attach (FailedPrecondition) before the netdev moves;
// a netdev that cannot follow takes the RDMA device back.
func TestAttachDetach_RDMA(t *testing.T) {
	const ns = "/run/netns/pod"
	for _, tc := range []struct {
		fail     string
		wantCode codes.Code
		want     []string
	}{
		{want: []string{"attachRDMA mlx5_0 " + ns, "attach ens5 " + ns + " net1", "detach ens5 " + ns, "detachRDMA mlx5_0 " + ns}},
		{fail: "attachRDMA", wantCode: codes.FailedPrecondition, want: []string{"attachRDMA mlx5_0 " + ns}},
		{fail: "attach", wantCode: codes.AlreadyExists, want: []string{"attachRDMA mlx5_0 " + ns, "attach ens5 " + ns + " net1", "detachRDMA mlx5_0 " + ns}},
	} {
		t.Run(tc.fail, func(t *testing.T) {
			calls := &callLog{}
			srv := New(slog.New(slog.DiscardHandler), Factories{}, failingMover{fakeMover{calls}, tc.fail})
			defer srv.Close()
			cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
			_, err := srv.Attach(t.Context(), &provisionerv1.AttachRequest{PreparedDevice: rdmaPrepared(), NetnsPath: ns, Config: cfg})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("Attach: %v, want %v", err, tc.wantCode)
			}
			if err == nil {
				if _, err := srv.Detach(t.Context(), &provisionerv1.DetachRequest{PreparedDevice: rdmaPrepared(), NetnsPath: ns, Config: cfg}); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, calls.take()); diff != "" {
				t.Errorf("mover calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidatePrepared_RDMA: an RDMA device name that is not one, or one
// on a device with no host link to move with, is refused naming the field.
func TestValidatePrepared_RDMA(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*devicev1.PreparedDevice)
	}{
		{"a path", func(pd *devicev1.PreparedDevice) { pd.Device.RdmaDevice = "../mlx5_0" }},
		{"too long", func(pd *devicev1.PreparedDevice) { pd.Device.RdmaDevice = string(make([]byte, 64)) }},
		{"no netdev", func(pd *devicev1.PreparedDevice) { pd.Device.KernelIfName, pd.OriginalLink = "", nil }},
		{"a created link", func(pd *devicev1.PreparedDevice) { pd.LinkCreated = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := rdmaPrepared()
			tc.edit(pd)
			err := validatePrepared("preparedDevice", pd)
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != "preparedDevice.device.rdmaDevice" {
				t.Errorf("validatePrepared: %v, want an error naming preparedDevice.device.rdmaDevice", err)
			}
		})
	}
	if err := validatePrepared("preparedDevice", rdmaPrepared()); err != nil {
		t.Errorf("a valid prepared device: %v", err)
	}
}
