package store

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// fullAllocation has every field of an Allocation set.
func fullAllocation(t *testing.T) *statev1.Allocation {
	t.Helper()
	a := &statev1.Allocation{
		Pool: "p", DeviceName: "d", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		ClaimUid: "c", ClaimNamespace: "ns", ClaimName: "n", Request: "r", PodUid: "pod",
		Config:         &devicev1.DeviceConfig{PodIfName: "net1"},
		PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "d"}},
		Phase:          statev1.Phase_PHASE_ATTACHED, NetnsPath: "/var/run/netns/x", LastError: "e", Attempts: 2,
		PoolAddresses: []string{"10.0.0.2/24"}, ShareId: "s",
		AttachError: "vrf: refused", AttachFailures: 3, AttachFailedAt: timestamppb.Now(),
	}
	fields := a.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !a.ProtoReflect().Has(fd) {
			t.Fatalf("fullAllocation does not set %s: set it", fd.Name())
		}
	}
	return a
}

func TestShallowCopy_SharesMessagesAndCopiesFields(t *testing.T) {
	a := fullAllocation(t)
	c := shallowCopy(a)
	if !proto.Equal(a, c) {
		t.Fatalf("copy differs:\n%v\n%v", a, c)
	}
	if c == a || c.GetConfig() != a.GetConfig() || c.GetPreparedDevice() != a.GetPreparedDevice() {
		t.Error("the copy is the row itself, or does not share its messages")
	}
	c.Phase, c.NetnsPath = statev1.Phase_PHASE_PREPARED, ""
	if a.GetPhase() != statev1.Phase_PHASE_ATTACHED || a.GetNetnsPath() == "" {
		t.Error("setting a field of the copy changed the row")
	}
}
