package driver

import (
	"context"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

// sharedParent is a sub-interface parent shared by bandwidth (1G).
var sharedParent = &devicev1.Device{Name: "mvs", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, KernelIfName: "mvs",
	BandwidthCapacity: 1_000_000_000, BandwidthDefault: 1_000_000_000,
	SubInterface: &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN, ParentIfName: "eth1"}}

// shareResult is an allocation of a share of the shared parent, as the
// scheduler writes it; bandwidth "" leaves consumedCapacity out.
func shareResult(share, bandwidth string) resourceapi.DeviceRequestAllocationResult {
	r := result("net", "mvs")
	id := types.UID(share)
	r.ShareID = &id
	if bandwidth != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{publish.CapacityBandwidth: resource.MustParse(bandwidth)}
	}
	return r
}

func shareClaim(name, pod, share, bandwidth string) *resourceapi.ResourceClaim {
	return claimSpec{name: name, pods: []string{pod}, results: []resourceapi.DeviceRequestAllocationResult{shareResult(share, bandwidth)},
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`, "net")}}.build()
}

// Two claims of two pods hold shares of one device at once: each is set up
// with its share (ID and the bandwidth the scheduler says it consumes),
// each has its own allocation row, keyed by share; unpreparing one leaves
// the other's.
func TestPrepare_SharesOfOneDevice(t *testing.T) {
	r := newRig(t)
	r.mem.devices = append(r.mem.devices, sharedParent)
	var mu sync.Mutex
	shares := map[string]uint64{}
	setup := r.prov.SetupFunc
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		mu.Lock()
		shares[in.GetShare().GetId()] = in.GetShare().GetBandwidth()
		mu.Unlock()
		resp, err := setup(in)
		if err == nil {
			resp.PreparedDevice.Device.Share = in.GetShare()
		}
		return resp, err
	}
	for _, c := range []*resourceapi.ResourceClaim{shareClaim("c1", "web", "0b1e-s1", "300M"), shareClaim("c2", "api", "0b1e-s2", "50M")} {
		got, err := r.prepare(t, c)
		if err != nil || len(got) != 1 || got[0].Device != "mvs" {
			t.Fatalf("claim %s: %v, %v; want mvs prepared", c.Name, got, err)
		}
	}
	if want := map[string]uint64{"0b1e-s1": 300_000_000, "0b1e-s2": 50_000_000}; len(shares) != 2 || shares["0b1e-s1"] != want["0b1e-s1"] || shares["0b1e-s2"] != want["0b1e-s2"] {
		t.Errorf("Setup got shares %v, want %v", shares, want)
	}
	rows := r.mem.snapshot()
	if len(rows) != 2 || rows[0].GetShareId() == rows[1].GetShareId() {
		t.Fatalf("rows %v, want one per share", rowSummary(rows))
	}
	if _, err := r.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{claimRef("c1")}); err != nil {
		t.Fatal(err)
	}
	rows = r.mem.snapshot()
	if len(rows) != 1 || rows[0].GetShareId() != "0b1e-s2" || rows[0].GetClaimUid() != "uid-c2" {
		t.Fatalf("after unpreparing c1: %v, want c2's share alone", rowSummary(rows))
	}
}

// A share the scheduler did not account (no consumedCapacity), or whose
// bandwidth is not a whole number, is refused naming the field, before
// anything is set up or recorded.
func TestPrepare_ShareWithoutBandwidth(t *testing.T) {
	for _, bw := range []string{"", "1500m", "0"} {
		r := newRig(t)
		r.mem.devices = append(r.mem.devices, sharedParent)
		_, err := r.prepare(t, shareClaim("c1", "web", "0b1e-s1", bw))
		if err == nil || !strings.Contains(err.Error(), "consumedCapacity.bandwidth") {
			t.Errorf("bandwidth %q: got %v, want an error naming consumedCapacity.bandwidth", bw, err)
		}
		for _, c := range r.rec.get() {
			if strings.HasPrefix(c, "prov.") || strings.HasPrefix(c, "state.BeginPrepare") {
				t.Errorf("bandwidth %q: %s was called", bw, c)
			}
		}
		if rows := r.mem.snapshot(); len(rows) != 0 {
			t.Errorf("bandwidth %q: rows %v, want none", bw, rowSummary(rows))
		}
	}
}
