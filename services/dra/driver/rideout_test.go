package driver

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// TestPrepareRidesOutARestart: the state service dies during the commit
// and the provisioner during a Setup (both Unavailable, once each); with a
// ride-out the prepare undoes each attempt and tries again, and the
// kubelet gets the prepared claim, with every row PREPARED and the
// provisioner holding each device once. Without one the first failure is
// the kubelet's.
func TestPrepareRidesOutARestart(t *testing.T) {
	for _, rideOut := range []time.Duration{0, 5 * time.Second} {
		r := newRig(t)
		r.d.rideOut = rideOut
		h := r.hold()
		commit, setup := r.state.CommitPrepareFunc, r.prov.SetupFunc
		var mu sync.Mutex
		commits, vf1Setups := 0, 0
		r.state.CommitPrepareFunc = func(in *statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
			if commits++; commits == 1 {
				return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
			}
			return commit(in)
		}
		r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
			mu.Lock()
			if in.GetDeviceName() == "vf1" {
				vf1Setups++
			}
			n := vf1Setups
			mu.Unlock()
			if in.GetDeviceName() == "vf1" && n == 2 { // vf1 of the second attempt
				return nil, status.Error(codes.Unavailable, "the provisioner has not been configured since it started")
			}
			return setup(in)
		}
		got, err := r.prepare(t, twoVFs.build())
		if rideOut == 0 {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("without a ride-out: %v, want the Unavailable error", err)
			}
			h.check(t)
			continue
		}
		if err != nil || len(got) != 2 {
			t.Fatalf("with a ride-out: %v, %v; want the claim's two devices", got, err)
		}
		if commits != 2 || vf1Setups != 3 {
			t.Errorf("%d commits and %d Setups of vf1, want 2 and 3 (three attempts)", commits, vf1Setups)
		}
		for _, row := range r.mem.snapshot() {
			if row.GetPhase() != statev1.Phase_PHASE_PREPARED {
				t.Errorf("row %s is %s, want PREPARED", row.GetDeviceName(), row.GetPhase())
			}
		}
		h.check(t, "vf1", "vf2")
	}
}

// TestPrepareRideOut_EverySetupMustPass: of a claim's Setups, failed at
// once, the prepare is tried again when each failed with Unavailable (a
// provisioner restarting), and not when one of them was refused for good:
// that failure is the kubelet's at once.
func TestPrepareRideOut_EverySetupMustPass(t *testing.T) {
	for _, tt := range []struct {
		name     string
		vf2      codes.Code
		wantVF1  int // Setups of vf1
		wantFail bool
	}{
		{name: "both unavailable: ridden out", vf2: codes.Unavailable, wantVF1: 2},
		{name: "one refused: not ridden out", vf2: codes.Unknown, wantVF1: 1, wantFail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.d.rideOut = 5 * time.Second
			h := r.hold()
			setup := r.prov.SetupFunc
			var mu sync.Mutex
			setups := map[string]int{}
			r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
				name := in.GetDeviceName()
				mu.Lock()
				setups[name]++
				n := setups[name]
				mu.Unlock()
				switch {
				case n > 1:
				case name == "vf1":
					return nil, status.Error(codes.Unavailable, "the provisioner has not been configured since it started")
				case name == "vf2":
					return nil, status.Error(tt.vf2, "setting up vf2")
				}
				return setup(in)
			}
			_, err := r.prepare(t, twoVFs.build())
			if (err != nil) != tt.wantFail {
				t.Errorf("prepare: %v, want failure %v", err, tt.wantFail)
			}
			if setups["vf1"] != tt.wantVF1 {
				t.Errorf("%d Setups of vf1, want %d", setups["vf1"], tt.wantVF1)
			}
			if tt.wantFail {
				h.check(t)
			} else {
				h.check(t, "vf1", "vf2")
			}
		})
	}
}
