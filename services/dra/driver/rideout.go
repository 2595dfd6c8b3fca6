package driver

import (
	"context"
	"errors"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// DefaultRideOut is how long the process's prepares ride out a restart
// of the state service or the provisioner: well inside the kubelet's 45 s
// NodePrepareResources timeout, and well beyond what either takes to come
// back (the chaos test kills and restarts them under load).
const DefaultRideOut = 20 * time.Second

// rideOutPace is the pause between two attempts of a prepare: doubling
// from 50ms up to 500ms, without jitter (one kubelet call, nothing to
// spread).
var rideOutPace = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 500 * time.Millisecond}

// rideOutFor is how long a prepare that fails with err is tried again:
// d.rideOut for codes.Unavailable; a quarter of it for a device missing
// from the inventory, which a restart of the state service leaves behind
// for a moment (the device, just freed, back in the host and allocated
// again, is copied into the state service's inventory once it is back);
// not at all for any other error. A prepare whose Setups failed at once
// (their errors joined) is tried again only as long as every one of them
// would be: a device the provisioner refused for good fails the claim at
// once.
func (d *Driver) rideOutFor(err error) time.Duration {
	fs := failures(err)
	out := d.rideOutForOne(fs[0])
	for _, f := range fs[1:] {
		out = min(out, d.rideOutForOne(f))
	}
	return out
}

func (d *Driver) rideOutForOne(err error) time.Duration {
	switch {
	case status.Code(err) == codes.Unavailable:
		return d.rideOut
	case errors.Is(err, ErrUnknownDevice):
		return d.rideOut / 4
	}
	return 0
}

// failures is the errors err joins (errors.Join, under any wrapping), or
// err alone.
func failures(err error) []error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
			return j.Unwrap()
		}
	}
	return []error{err}
}

// prepareRidingOut is prepareClaim, run again (see rideOutFor) while it fails because the
// state service or the provisioner went away (codes.Unavailable: a call
// in flight when its server died, or a provisioner not configured again
// yet), for at most d.rideOut and while ctx lasts. Each attempt undoes
// what it did before it returns (prepareClaim rolls back, and a rollback
// that could not reach its server leaves intents the next attempt settles,
// as it would at the kubelet's own retry), and every state call is
// idempotent, so an attempt starts from what the last one left. Without
// it the kubelet's retry of a failed prepare comes 10 s or more later.
func (d *Driver) prepareRidingOut(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	start := time.Now()
	pace := rideOutPace
	for attempt := 1; ; attempt++ {
		devices, err := d.prepareClaim(ctx, claim)
		// Another attempt is made only if it starts within the ride-out.
		pause := pace.Step()
		if err == nil || time.Since(start)+pause > d.rideOutFor(err) {
			return devices, err
		}
		d.log.Info("prepare failed while a netdra service restarts; trying again", "claim", claim.Namespace+"/"+claim.Name,
			"claimUID", claim.UID, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return devices, err
		case <-time.After(pause):
		}
	}
}
