package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

var (
	v4Pool = &statev1.IPPool{Name: "v4", Subnet: "10.20.0.0/24", RangeStart: "10.20.0.10", RangeEnd: "10.20.0.59",
		Gateway: "10.20.0.1", Routes: []*devicev1.Route{{Destination: "10.30.0.0/16"}}}
	v6Pool = &statev1.IPPool{Name: "v6", Subnet: "fd00:20::/64", RangeStart: "fd00:20::100", RangeEnd: "fd00:20::1ff",
		Gateway: "fd00:20::1", Routes: []*devicev1.Route{{Destination: "fd00:30::/64"}}}
)

// prepareIP begins a prepare of one device for one claim with the given
// config.
func prepareIP(ctx context.Context, c statev1.StateServiceClient, n int, cfg *devicev1.DeviceConfig) (*statev1.Allocation, error) {
	a := &statev1.Allocation{Pool: "pool", DeviceName: fmt.Sprintf("dev%d", n), Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		ClaimUid: fmt.Sprintf("claim%d", n), ClaimNamespace: "ns", ClaimName: fmt.Sprintf("c%d", n), PodUid: fmt.Sprintf("pod%d", n), Config: cfg}
	resp, err := c.BeginPrepare(ctx, &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}})
	if err != nil {
		return nil, err
	}
	return resp.GetAllocations()[0], nil
}

func pools(t *testing.T, ctx context.Context, c statev1.StateServiceClient) map[string]*statev1.IPPoolStatus {
	t.Helper()
	resp, err := c.ListIPPools(ctx, &statev1.ListIPPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*statev1.IPPoolStatus{}
	for _, p := range resp.GetPools() {
		out[p.GetPool().GetName()] = p
	}
	return out
}

// TestIPAM_ConcurrentPreparesExhaustPool: 100 concurrent prepares on a
// 50-address pool give 50 distinct addresses and 50 clear errors; the
// addresses survive a kill -9 of the state service, and none is handed out
// twice after the restart.
func TestIPAM_ConcurrentPreparesExhaustPool(t *testing.T) {
	sock, db := newDirs(t)
	p := startState(t, sock, db)
	c, _ := dialState(t, sock)
	ctx := testCtx(t, 2*time.Minute)
	if _, err := c.ReplaceIPPools(ctx, &statev1.ReplaceIPPoolsRequest{Pools: []*statev1.IPPool{v4Pool}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	var errs []error
	var wg sync.WaitGroup
	for n := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row, err := prepareIP(ctx, c, n, &devicev1.DeviceConfig{PodIfName: "net1", IpPools: []string{"v4"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if len(row.GetPoolAddresses()) != 1 || len(row.GetConfig().GetAddresses()) != 1 || row.GetPoolAddresses()[0] != row.GetConfig().GetAddresses()[0] {
				t.Errorf("claim%d: pool addresses %v, config addresses %v", n, row.GetPoolAddresses(), row.GetConfig().GetAddresses())
				return
			}
			if r := row.GetConfig().GetRoutes(); len(r) != 1 || r[0].GetDestination() != "10.30.0.0/16" || r[0].GetGateway() != "10.20.0.1" {
				t.Errorf("claim%d: routes %v, want the pool's route via its gateway", n, r)
			}
			got[row.GetPoolAddresses()[0]]++
		}()
	}
	wg.Wait()
	if len(got) != 50 || len(errs) != 50 {
		t.Fatalf("%d distinct addresses and %d errors, want 50 and 50", len(got), len(errs))
	}
	for a, k := range got {
		pfx := netip.MustParsePrefix(a)
		if k != 1 || pfx.Bits() != 24 || pfx.Addr().Compare(netip.MustParseAddr("10.20.0.10")) < 0 || pfx.Addr().Compare(netip.MustParseAddr("10.20.0.59")) > 0 {
			t.Errorf("address %s handed out %d times (want once, inside 10.20.0.10-59, /24)", a, k)
		}
	}
	for _, err := range errs {
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `ip pool "v4" has no free address`) {
			t.Fatalf("error %v, want ResourceExhausted naming the pool", err)
		}
	}
	if st := pools(t, ctx, c)["v4"]; st.GetUsed() != 50 || st.GetFree() != "0" || st.GetSize() != "50" || len(st.GetLeases()) != 50 {
		t.Fatalf("pool status: used %d free %s size %s leases %d", st.GetUsed(), st.GetFree(), st.GetSize(), len(st.GetLeases()))
	}

	// kill -9 and restart: the pool and its 50 leases are still there.
	p.kill()
	startState(t, sock, db)
	c, _ = dialState(t, sock)
	st := pools(t, ctx, c)["v4"]
	if st.GetUsed() != 50 {
		t.Fatalf("after kill -9: %d addresses in use, want 50", st.GetUsed())
	}
	if _, err := prepareIP(ctx, c, 1000, &devicev1.DeviceConfig{IpPools: []string{"v4"}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("after kill -9 the pool is still full, got %v", err)
	}

	// Release two (one rolled back, one deleted after unprepare) and they
	// are handed out again, and only they.
	var released []string
	for _, l := range st.GetLeases()[:2] {
		released = append(released, l.GetAddress())
	}
	if _, err := c.AbortPrepare(ctx, &statev1.AbortPrepareRequest{ClaimUid: st.GetLeases()[0].GetClaimUid(),
		Keys: []*statev1.AllocationKey{st.GetLeases()[0].GetAllocation()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteAllocation(ctx, &statev1.DeleteAllocationRequest{Key: st.GetLeases()[1].GetAllocation()}); err != nil {
		t.Fatal(err)
	}
	var again []string
	for n := 2000; n < 2002; n++ {
		row, err := prepareIP(ctx, c, n, &devicev1.DeviceConfig{IpPools: []string{"v4"}})
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, row.GetPoolAddresses()[0])
	}
	if !sameSet(released, again) {
		t.Fatalf("released %v, handed out %v", released, again)
	}
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// TestIPAM_DualStackStaticAndRetire covers dual stack, a static address in a
// pool's range, the bad requests, and pools removed or shrunk in use.
func TestIPAM_DualStackStaticAndRetire(t *testing.T) {
	sock, db := newDirs(t)
	startState(t, sock, db)
	c, _ := dialState(t, sock)
	ctx := testCtx(t, time.Minute)

	// Bad pools: InvalidArgument naming the field; nothing changes.
	for _, tc := range []struct {
		pools []*statev1.IPPool
		field string
	}{
		{[]*statev1.IPPool{{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.1.1"}}, "pools[0].rangeStart"},
		{[]*statev1.IPPool{{Name: "a", Subnet: "10.0.0.0/24", RangeStart: "10.0.0.10", RangeEnd: "10.0.0.20", Gateway: "10.0.0.15"}}, "pools[0].gateway"},
		{[]*statev1.IPPool{v4Pool, {Name: "v4", Subnet: "10.9.0.0/24"}}, "pools[1].name"},
		{[]*statev1.IPPool{v4Pool, {Name: "b", Subnet: "10.20.0.0/24", RangeStart: "10.20.0.50", RangeEnd: "10.20.0.70"}}, "pools[1].rangeStart"},
	} {
		_, err := c.ReplaceIPPools(ctx, &statev1.ReplaceIPPoolsRequest{Pools: tc.pools})
		if f := badField(err); f != tc.field {
			t.Errorf("%v: error on %q (%v), want %q", tc.pools, f, err, tc.field)
		}
	}
	if len(pools(t, ctx, c)) != 0 {
		t.Fatal("a refused ReplaceIPPools changed the pools")
	}
	if _, err := c.ReplaceIPPools(ctx, &statev1.ReplaceIPPoolsRequest{Pools: []*statev1.IPPool{v4Pool, v6Pool}}); err != nil {
		t.Fatal(err)
	}

	// Dual stack: one address of each family, with the routes of both.
	row, err := prepareIP(ctx, c, 1, &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.168.7.2/24"}, IpPools: []string{"v4", "v6"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.168.7.2/24", "10.20.0.10/24", "fd00:20::100/64"}
	if fmt.Sprint(row.GetConfig().GetAddresses()) != fmt.Sprint(want) || len(row.GetConfig().GetRoutes()) != 2 {
		t.Fatalf("addresses %v routes %v, want %v and two routes", row.GetConfig().GetAddresses(), row.GetConfig().GetRoutes(), want)
	}
	// Idempotent: the same claim prepared again keeps its addresses.
	if again, err := prepareIP(ctx, c, 1, &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.168.7.2/24"}, IpPools: []string{"v4", "v6"}}); err != nil ||
		fmt.Sprint(again.GetConfig().GetAddresses()) != fmt.Sprint(want) {
		t.Fatalf("repeated prepare: %v %v", again.GetConfig().GetAddresses(), err)
	}

	// Bad claim configs: clear errors, nothing written.
	for _, tc := range []struct {
		cfg   *devicev1.DeviceConfig
		code  codes.Code
		field string
	}{
		{&devicev1.DeviceConfig{IpPools: []string{"nope"}}, codes.InvalidArgument, "allocations[0].config.ipPools[0]"},
		{&devicev1.DeviceConfig{IpPools: []string{"v4", "v4"}}, codes.InvalidArgument, "allocations[0].config.ipPools[1]"},
		{&devicev1.DeviceConfig{Addresses: []string{"10.20.0.1/24"}}, codes.InvalidArgument, "allocations[0].config.addresses[0]"},
		// The static address another claim got from the pool.
		{&devicev1.DeviceConfig{Addresses: []string{"10.20.0.10/24"}}, codes.AlreadyExists, ""},
	} {
		_, err := prepareIP(ctx, c, 2, tc.cfg)
		if status.Code(err) != tc.code || badField(err) != tc.field {
			t.Errorf("%v: got %v, want %s on %q", tc.cfg, err, tc.code, tc.field)
		}
	}
	// A static address in the range is reserved against the pool: the pool
	// skips it, and it shows as a static lease.
	if _, err := prepareIP(ctx, c, 3, &devicev1.DeviceConfig{Addresses: []string{"10.20.0.11/24"}}); err != nil {
		t.Fatal(err)
	}
	row, err = prepareIP(ctx, c, 4, &devicev1.DeviceConfig{IpPools: []string{"v4"}})
	if err != nil || row.GetPoolAddresses()[0] != "10.20.0.12/24" {
		t.Fatalf("got %v %v, want 10.20.0.12/24 (10.20.0.11 is held statically)", row.GetPoolAddresses(), err)
	}
	st := pools(t, ctx, c)["v4"]
	if st.GetUsed() != 3 || st.GetFree() != "47" {
		t.Fatalf("v4: used %d free %s, want 3 and 47", st.GetUsed(), st.GetFree())
	}
	statics := 0
	for _, l := range st.GetLeases() {
		if l.GetStatic() {
			statics++
			if l.GetAddress() != "10.20.0.11/24" || l.GetClaimName() != "c3" {
				t.Errorf("static lease %v", l)
			}
		}
	}
	if statics != 1 {
		t.Errorf("%d static leases, want 1", statics)
	}

	// v6 removed and v4 shrunk while in use: v6 is retired with its lease,
	// v4 reports the leases outside its new range; neither hands out more.
	shrunk := &statev1.IPPool{Name: "v4", Subnet: "10.20.0.0/24", RangeStart: "10.20.0.12", RangeEnd: "10.20.0.13", Gateway: "10.20.0.1"}
	resp, err := c.ReplaceIPPools(ctx, &statev1.ReplaceIPPoolsRequest{Pools: []*statev1.IPPool{shrunk}})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*statev1.IPPoolStatus{}
	for _, p := range resp.GetPools() {
		byName[p.GetPool().GetName()] = p
	}
	if v6 := byName["v6"]; !v6.GetRetired() || v6.GetUsed() != 1 || v6.GetFree() != "0" {
		t.Fatalf("v6 after removal: %v", v6)
	}
	// 10.20.0.10 (handed out, now outside the range) and 10.20.0.12; the
	// static 10.20.0.11 is outside the new range and no longer the pool's.
	if v4 := byName["v4"]; v4.GetUsed() != 2 || v4.GetOutOfRange() != 1 || v4.GetFree() != "1" {
		t.Fatalf("v4 after shrinking: used %d outOfRange %d free %s", v4.GetUsed(), v4.GetOutOfRange(), v4.GetFree())
	}
	if _, err := prepareIP(ctx, c, 5, &devicev1.DeviceConfig{IpPools: []string{"v6"}}); badField(err) != "allocations[0].config.ipPools[0]" {
		t.Fatalf("a retired pool handed out an address: %v", err)
	}
	// Released, the retired pool goes away.
	if _, err := c.DeleteAllocation(ctx, &statev1.DeleteAllocationRequest{Key: &statev1.AllocationKey{Pool: "pool", DeviceName: "dev1"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := pools(t, ctx, c)["v6"]; ok {
		t.Fatal("the retired pool is still listed after its last address was released")
	}
	dump, err := c.Dump(ctx, &statev1.DumpRequest{})
	if err != nil || len(dump.GetIpPools()) != 1 {
		t.Fatalf("Dump shows %d pools (%v), want 1", len(dump.GetIpPools()), err)
	}
}

// badField is the field an InvalidArgument names, "" otherwise.
func badField(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return ""
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return errors.New("no field").Error()
}
