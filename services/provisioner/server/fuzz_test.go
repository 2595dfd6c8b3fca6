package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
)

// FuzzRestore feeds Restore, with the dummy manager offering dummy0 and
// dummy1, any claim status data. A rejection is a
// *fielderr.Error on data (InvalidArgument), the same every time. An
// accepted prepared device round-trips (serialized again and restored, it
// is the same), and the calls that take it next take it: Attach and
// Detach's checks pass, its name is a single path element (the eBPF pins
// are kept under it), and its interface names are ones Attach takes.
func FuzzRestore(f *testing.F) {
	for _, pd := range []*devicev1.PreparedDevice{
		{Device: &devicev1.Device{Name: "0000-03-00-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, KernelIfName: "ens1f0v0", PfName: "ens1f0", VfIndex: new(int32(3))},
			OriginalLink: &devicev1.LinkSnapshot{Name: "ens1f0v0", MacAddress: "02:00:00:00:00:01", Mtu: 1500, Up: true},
			OriginalVf:   &devicev1.VfSnapshot{Vlan: 0, SpoofChk: true, LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO}},
		{Device: &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0"}, LinkCreated: true},
		{Device: &devicev1.Device{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "eth1", Attributes: map[string]string{"a": "b"}},
			OriginalLink:         &devicev1.LinkSnapshot{Name: "eth1"},
			DetachedEbpfPrograms: []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: 7, Pin: "/sys/fs/bpf/netdra/x"}}},
	} {
		b, err := protojson.Marshal(pd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`{}`, `null`, `{"device":{"name":"..","manager":"DEVICE_MANAGER_DUMMY"}}`,
		`{"device":{"name":"d","manager":999}}`, `{"device":{"name":"a/b","manager":2,"kernelIfName":"a b"},"linkCreated":true}`} {
		f.Add([]byte(s))
	}
	srv := New(slog.New(slog.DiscardHandler), Factories{
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) { return dummy.New(nil, c) },
	}, nil)
	defer srv.Close()
	if _, err := srv.Configure(context.Background(), &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2}}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		resp, err := srv.Restore(ctx, &provisionerv1.RestoreRequest{Data: data})
		_, again := srv.Restore(ctx, &provisionerv1.RestoreRequest{Data: data})
		if err != nil {
			var fe *fielderr.Error
			if !errors.As(err, &fe) || (fe.Field != "data" && !strings.HasPrefix(fe.Field, "data.")) {
				t.Fatalf("Restore(%q) = %v, want a *fielderr.Error on data", data, err)
			}
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("Restore(%q) is not deterministic: %v, then %v", data, err, again)
			}
			return
		}
		pd := resp.GetPreparedDevice()
		b, err := protojson.Marshal(pd)
		if err != nil {
			t.Fatal(err)
		}
		back, err := srv.Restore(ctx, &provisionerv1.RestoreRequest{Data: b})
		if err != nil || !proto.Equal(back.GetPreparedDevice(), pd) {
			t.Fatalf("Restore(%q) = %v; serialized again, %s, it gives %v, %v", data, pd, b, back.GetPreparedDevice(), err)
		}
		checkRestored(t, srv, data, pd)
	})
}

func checkRestored(t *testing.T, srv *Server, data []byte, pd *devicev1.PreparedDevice) {
	t.Helper()
	if err := srv.validateMove(pd, "/var/run/netns/pod", nil); err != nil {
		t.Fatalf("Restore(%q) accepted %v, which Attach refuses: %v", data, pd, err)
	}
	if name := pd.GetDevice().GetName(); filepath.Dir(filepath.Join("/pins", name)) != "/pins" {
		t.Fatalf("Restore(%q) accepted the device name %q, which is no single path element", data, name)
	}
	for _, n := range []string{pd.GetDevice().GetKernelIfName(), pd.GetOriginalLink().GetName()} {
		if err := link.Validate(&devicev1.DeviceConfig{PodIfName: n}); err != nil {
			t.Fatalf("Restore(%q) accepted the interface name %q: %v", data, n, err)
		}
	}
	if m := pd.GetOriginalLink().GetMacAddress(); m != "" {
		if _, err := net.ParseMAC(m); err != nil {
			t.Fatalf("Restore(%q) accepted the original MAC %q: %v", data, m, err)
		}
	}
}
