package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// TestDurability_KillMidWrite kills the service with SIGKILL while writers
// are busy, restarts it on the same file, and checks that every write it
// acknowledged is there and that no row is half-written, several times over.
func TestDurability_KillMidWrite(t *testing.T) {
	sock, db := newDirs(t)
	acked := map[string]*statev1.Allocation{} // claim -> last acknowledged row
	var mu sync.Mutex
	next := 0
	for round := range 3 {
		p := startState(t, sock, db)
		client, _ := dialState(t, sock)
		ctx := testCtx(t, time.Minute)
		// The writers' calls end when the service is killed: cancelled
		// right after the kill, a call made between the kill and the stop
		// would otherwise wait for the service (rpc.Dial's WaitForReady)
		// until ctx ends, and the restart below comes only after them.
		wctx, cancelWriters := context.WithCancel(ctx)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					n := next
					next++
					mu.Unlock()
					claim := fmt.Sprintf("c%d", n)
					dev := fmt.Sprintf("dev%d", n)
					a := &statev1.Allocation{Pool: "pool", DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
						ClaimUid: claim, PodUid: fmt.Sprintf("pod%d-%d", round, w),
						Config: &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"10.0.0.1/24"}}}
					resp, err := client.BeginPrepare(wctx, &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}})
					if err != nil {
						return // the kill
					}
					mu.Lock()
					acked[claim] = resp.GetAllocations()[0]
					mu.Unlock()
					pd := &devicev1.PreparedDevice{Device: &devicev1.Device{Name: dev, KernelIfName: dev, Mtu: 1500}}
					_, err = client.CommitPrepare(wctx, &statev1.CommitPrepareRequest{ClaimUid: claim,
						Allocations: []*statev1.PreparedAllocation{{Key: &statev1.AllocationKey{Pool: "pool", DeviceName: dev}, PreparedDevice: pd}}})
					if err != nil {
						return
					}
					row := proto.CloneOf(resp.GetAllocations()[0])
					row.Phase, row.PreparedDevice = statev1.Phase_PHASE_PREPARED, pd
					mu.Lock()
					acked[claim] = row
					mu.Unlock()
				}
			}()
		}
		// Let the writers get going, then kill the service under them.
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= (round+1)*40 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		p.kill()
		cancelWriters()
		close(stop)
		wg.Wait()

		p = startState(t, sock, db)
		client, _ = dialState(t, sock)
		dump, err := client.Dump(ctx, &statev1.DumpRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*statev1.Allocation{}
		for _, a := range dump.GetAllocations() {
			got[a.GetClaimUid()] = a
			// Whole rows only: an intent has no prepared device, a prepared
			// row has all of it.
			switch a.GetPhase() {
			case statev1.Phase_PHASE_PREPARING:
				if a.GetPreparedDevice() != nil {
					t.Errorf("round %d: intent %s holds a prepared device", round, a.GetDeviceName())
				}
			case statev1.Phase_PHASE_PREPARED:
				if a.GetPreparedDevice().GetDevice().GetMtu() != 1500 || a.GetConfig().GetPodIfName() != "net1" {
					t.Errorf("round %d: half-written row %v", round, a)
				}
			default:
				t.Errorf("round %d: unexpected phase %v", round, a.GetPhase())
			}
		}
		mu.Lock()
		if len(acked) == 0 {
			t.Fatalf("round %d: no write was acknowledged", round)
		}
		for claim, want := range acked {
			g, ok := got[claim]
			if !ok {
				t.Errorf("round %d: acknowledged allocation of %s lost", round, claim)
				continue
			}
			// A write may have landed without its acknowledgement; it may be
			// ahead of what was acknowledged, never behind.
			if want.GetPhase() == statev1.Phase_PHASE_PREPARED {
				if diff := cmp.Diff(want, g, protocmp.Transform()); diff != "" {
					t.Errorf("round %d: %s (-acked +stored):\n%s", round, claim, diff)
				}
			}
		}
		t.Logf("round %d: %d acknowledged, %d stored", round, len(acked), len(got))
		// Sync acked with what is stored, for the next round.
		for claim, a := range got {
			acked[claim] = a
		}
		mu.Unlock()
		p.stop()
	}
}
