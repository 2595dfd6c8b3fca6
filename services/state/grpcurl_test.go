package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/netdra/netdra/shared/testinfra/grpcurltest"
)

// TestGrpcurl is what a person does by hand: list the services of a running
// state service, check its health, write an allocation, kill -9 the service,
// start it again and find the allocation still there.
func TestGrpcurl(t *testing.T) {
	bin := grpcurltest.Binary(t)
	sock, db := newDirs(t)
	p := startState(t, sock, db)

	services := strings.Fields(grpcurltest.Call(t, bin, sock, "", "list"))
	for _, want := range []string{"netdra.state.v1.StateService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("grpcurl list: %q lacks %s", services, want)
		}
	}
	if out := grpcurltest.Call(t, bin, sock, "", "grpc.health.v1.Health/Check"); !strings.Contains(out, `"SERVING"`) {
		t.Errorf("health: %s", out)
	}
	if out := grpcurltest.Call(t, bin, sock, "", "describe", "netdra.state.v1.StateService"); !strings.Contains(out, "rpc BeginPrepare") {
		t.Errorf("describe: %s", out)
	}
	grpcurltest.Call(t, bin, sock, `{"pools":[{"name":"v4","subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.19"}]}`,
		"netdra.state.v1.StateService/ReplaceIPPools")
	grpcurltest.Call(t, bin, sock, `{"allocations":[{"pool":"p","deviceName":"dummy0","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c1","podUid":"p1","config":{"podIfName":"net1","ipPools":["v4"]}}]}`,
		"netdra.state.v1.StateService/BeginPrepare")

	p.kill()
	p = startState(t, sock, db)
	var dump struct {
		Allocations []struct {
			Pool, DeviceName, ClaimUID, Phase string
			Config                            struct{ PodIfName string }
		}
	}
	out := grpcurltest.Call(t, bin, sock, "", "netdra.state.v1.StateService/Dump")
	if err := json.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatalf("dump is not JSON: %v\n%s", err, out)
	}
	if len(dump.Allocations) != 1 || dump.Allocations[0].DeviceName != "dummy0" ||
		dump.Allocations[0].Phase != "PHASE_PREPARING" || dump.Allocations[0].Config.PodIfName != "net1" {
		t.Errorf("after kill -9 and restart the dump is %s", out)
	}
	// The pools, and who holds each address, survive the restart too.
	var pools struct {
		Pools []struct {
			Size, Free string
			Used       int
			Leases     []struct{ Address, ClaimUID string }
		}
	}
	out = grpcurltest.Call(t, bin, sock, "", "netdra.state.v1.StateService/ListIPPools")
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatalf("ListIPPools is not JSON: %v\n%s", err, out)
	}
	if len(pools.Pools) != 1 || pools.Pools[0].Size != "10" || pools.Pools[0].Used != 1 || pools.Pools[0].Free != "9" ||
		len(pools.Pools[0].Leases) != 1 || pools.Pools[0].Leases[0].Address != "10.0.0.10/24" || pools.Pools[0].Leases[0].ClaimUID != "c1" {
		t.Errorf("ListIPPools after kill -9 and restart: %s", out)
	}
	p.stop()
}
