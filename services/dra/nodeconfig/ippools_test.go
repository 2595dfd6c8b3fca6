package nodeconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

func TestIPPools(t *testing.T) {
	spec := &v1alpha1.NodeConfigSpec{IPPools: []v1alpha1.IPPool{{Name: "v4", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.10",
		RangeEnd: "10.0.0.20", Gateway: "10.0.0.1", Exclude: []string{"10.0.0.15"},
		Routes: []v1alpha1.IPPoolRoute{{Destination: "0.0.0.0/0"}, {Destination: "10.9.0.0/16", Gateway: "10.0.0.2"}}}}}
	want := &statev1.ReplaceIPPoolsRequest{Pools: []*statev1.IPPool{{Name: "v4", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.10",
		RangeEnd: "10.0.0.20", Gateway: "10.0.0.1", Exclude: []string{"10.0.0.15"},
		Routes: []*devicev1.Route{{Destination: "0.0.0.0/0"}, {Destination: "10.9.0.0/16", Gateway: "10.0.0.2"}}}}}
	if got := IPPools(spec); !proto.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := IPPools(&v1alpha1.NodeConfigSpec{}); len(got.GetPools()) != 0 {
		t.Fatalf("no ipPools gave %v", got)
	}
}

func TestIPPoolsDraining(t *testing.T) {
	if got := IPPoolsDraining([]*statev1.IPPoolStatus{{Pool: &statev1.IPPool{Name: "a"}, Used: 3}}); got != "" {
		t.Errorf("a pool in use, in range: %q", got)
	}
	got := IPPoolsDraining([]*statev1.IPPoolStatus{
		{Pool: &statev1.IPPool{Name: "old"}, Retired: true, Used: 2},
		{Pool: &statev1.IPPool{Name: "small"}, Used: 4, OutOfRange: 1},
	})
	want := `ip pool "old" was removed but 2 of its addresses are in use; ip pool "small" has 1 addresses in use outside its range; they are kept until their claims are unprepared`
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestIPPoolUsage: the NodeConfig status counts every configured pool with
// the range it counted (the operator trusts a count only for the range it
// wrote); a retired pool is left out.
func TestIPPoolUsage(t *testing.T) {
	got := IPPoolUsage([]*statev1.IPPoolStatus{
		{Pool: &statev1.IPPool{Name: "v4", RangeStart: "10.0.0.1", RangeEnd: "10.0.0.62"}, Size: "62", Used: 2, Free: "60"},
		{Pool: &statev1.IPPool{Name: "old"}, Retired: true, Used: 1},
	})
	want := []v1alpha1.IPPoolUsage{{Name: "v4", RangeStart: "10.0.0.1", RangeEnd: "10.0.0.62", Size: "62", Used: 2, Free: "60"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
