package driver

import (
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// The state service's config is the one in force: when BeginPrepare adds
// addresses and routes from the claim's ip pools, Setup gets them (with
// the pool), and so do the claim status's networkData and the commit.
func TestPrepare_UsesTheStateServicesConfig(t *testing.T) {
	r := newRig(t)
	begin := r.state.BeginPrepareFunc
	r.state.BeginPrepareFunc = func(in *statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error) {
		in = proto.CloneOf(in)
		for _, a := range in.GetAllocations() {
			if a.GetDeviceName() == "vf1" {
				a.Config.Addresses = append(a.Config.Addresses, "10.60.0.10/24")
				a.PoolAddresses = []string{"10.60.0.10/24"}
			}
		}
		return begin(in)
	}
	var mu sync.Mutex
	setups := map[string]*provisionerv1.SetupRequest{} // by device; they run at once
	setup := r.prov.SetupFunc
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		mu.Lock()
		setups[in.GetDeviceName()] = in
		mu.Unlock()
		return setup(in)
	}
	if _, err := r.prepare(t, twoVFs.build()); err != nil {
		t.Fatal(err)
	}
	if len(setups) != 2 || setups["vf1"].GetPool() != testPool || setups["vf2"].GetPool() != testPool {
		t.Fatalf("setups %v, want one of vf1 and one of vf2, with the pool %q", setups, testPool)
	}
	if got := setups["vf1"].GetConfig().GetAddresses(); len(got) != 2 || got[1] != "10.60.0.10/24" {
		t.Errorf("Setup of vf1 got addresses %v, want the pool's address added", got)
	}
	st := r.claims.getWritten("uid-c1")
	if len(st) != 2 || st[0].NetworkData == nil || len(st[0].NetworkData.IPs) != 2 || st[0].NetworkData.IPs[1] != "10.60.0.10/24" {
		t.Errorf("claim status %+v, want vf1's networkData with the pool's address", st)
	}
}
