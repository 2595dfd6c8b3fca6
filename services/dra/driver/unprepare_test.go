package driver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

func claimRef(name string) kubeletplugin.NamespacedObject {
	o := kubeletplugin.NamespacedObject{UID: types.UID("uid-" + name)}
	o.Namespace, o.Name = "default", name
	return o
}

func TestUnprepare(t *testing.T) {
	for _, tt := range unprepareCases {
		t.Run(tt.name, tt.run)
	}
}

// unprepareCase is one case of TestUnprepare: claim c1 unprepared on a
// rig with rows (and change's faults), and what it must return, call and
// leave.
type unprepareCase struct {
	name      string
	rows      []*statev1.Allocation
	change    func(*rig)
	wantErr   string
	wantCalls []string
	wantRows  []string
}

// freeBusy makes the provisioner's Free fail: the PF is busy.
func freeBusy(r *rig) {
	r.prov.FreeFunc = func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
		return nil, status.Error(codes.Unknown, "PF ens1f0 is busy")
	}
}

// unprepareCases are TestUnprepare's cases.
var unprepareCases = []unprepareCase{
	{
		name: "frees each device and deletes its allocation",
		rows: []*statev1.Allocation{
			row("c1", "web", "vf1", prepared, nil), row("c1", "web", "vf2", attached, nil),
			row("c2", "web", "vf3", prepared, nil),
		},
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"prov.Free vf1", "state.DeleteAllocation pool-a/vf1",
			"prov.Free vf2", "state.DeleteAllocation pool-a/vf2",
		},
		wantRows: []string{"pool-a/vf3 PHASE_PREPARED uid-c2 pod=uid-web if= pd"},
	},
	{
		name: "free finds the device lost: an event on the claim, the allocation deleted",
		rows: []*statev1.Allocation{row("c1", "web", "vf1", attached, nil)},
		change: func(r *rig) {
			r.prov.FreeFunc = func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
				return &provisionerv1.FreeResponse{DeviceLost: true}, nil
			}
		},
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"prov.Free vf1", "claims.Event Warning DeviceLost", "state.DeleteAllocation pool-a/vf1",
		},
		wantRows: []string{},
	},
	{
		name:      "unknown claim: nothing to do",
		rows:      []*statev1.Allocation{row("c2", "web", "vf3", prepared, nil)},
		wantCalls: []string{"state.ListAllocations claim=uid-c1"},
		wantRows:  []string{"pool-a/vf3 PHASE_PREPARED uid-c2 pod=uid-web if= pd"},
	},
	{
		name:   "free fails: kept as freeing-failed, nil to the kubelet",
		rows:   []*statev1.Allocation{row("c1", "web", "vf1", prepared, nil)},
		change: freeBusy,
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1",
		},
		wantRows: []string{"pool-a/vf1 PHASE_FREEING_FAILED uid-c1 pod=uid-web if= pd"},
	},
	{
		name: "free fails and cannot be recorded: an error, the kubelet retries",
		rows: []*statev1.Allocation{row("c1", "web", "vf1", prepared, nil)},
		change: func(r *rig) {
			freeBusy(r)
			r.state.MarkFreeFailedFunc = func(*statev1.MarkFreeFailedRequest) (*statev1.MarkFreeFailedResponse, error) {
				return nil, status.Error(codes.Unavailable, "state service down")
			}
		},
		wantErr: "recording the failed free of vf1: state service down",
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1",
		},
		wantRows: []string{"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if= pd"},
	},
	{
		name: "state unreachable: an error",
		change: func(r *rig) {
			r.state.ListAllocationsFunc = func(*statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
				return nil, status.Error(codes.Unavailable, "state service down")
			}
		},
		wantErr:   "listing allocations: state service down",
		wantCalls: []string{"state.ListAllocations claim=uid-c1"},
		wantRows:  []string{},
	},
	{
		name: "an interrupted dummy intent: its link is freed, the intent aborted",
		rows: []*statev1.Allocation{row("c1", "web", "dummy0", preparing, nil)},
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"state.ListDevices", "prov.Free dummy0", "state.AbortPrepare pool-a/dummy0",
		},
		wantRows: []string{},
	},
	{
		name: "an interrupted VF intent: nothing to free, the intent aborted",
		rows: []*statev1.Allocation{row("c1", "web", "vf1", preparing, nil)},
		wantCalls: []string{
			"state.ListAllocations claim=uid-c1",
			"state.ListDevices", "state.AbortPrepare pool-a/vf1",
		},
		wantRows: []string{},
	},
}

// run unprepares claim c1 and checks its result, the calls and the state's
// rows.
func (tt unprepareCase) run(t *testing.T) {
	r := newRig(t, tt.rows...)
	if tt.change != nil {
		tt.change(r)
	}
	res, err := r.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{claimRef("c1")})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := res["uid-c1"]
	if !ok || len(res) != 1 {
		t.Fatalf("results %v, want one for uid-c1", res)
	}
	switch {
	case tt.wantErr == "" && got != nil:
		t.Errorf("unprepare: %v", got)
	case tt.wantErr != "" && (got == nil || got.Error() != tt.wantErr):
		t.Errorf("error %v, want %q", got, tt.wantErr)
	}
	if diff := cmp.Diff(tt.wantCalls, r.rec.get()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantRows, rowSummary(r.mem.snapshot())); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
}

// runDriver runs the retry loop, on the real clock, until the test ends.
func runDriver(t *testing.T, d *Driver) {
	d.now = time.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// failingFree fails the first n Frees.
func failingFree(n int32) func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
	var calls atomic.Int32
	return func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
		if calls.Add(1) <= n {
			return nil, status.Error(codes.Unknown, "PF ens1f0 is busy")
		}
		return &provisionerv1.FreeResponse{}, nil
	}
}

func TestRun_RetriesFreeUntilItSucceeds(t *testing.T) {
	r := newRig(t, row("c1", "web", "vf1", prepared, nil), row("c2", "db", "vf2", prepared, nil))
	r.prov.FreeFunc = failingFree(3)
	runDriver(t, r.d)
	res, _ := r.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{claimRef("c1")})
	if err := res["uid-c1"]; err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	waitFor(t, "vf1's allocation to go", func() bool { return len(r.mem.snapshot()) == 1 })
	want := []string{
		"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1", // unprepare
		"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1", // Run
		"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1",
		"prov.Free vf1", "state.DeleteAllocation pool-a/vf1",
	}
	if diff := cmp.Diff(want, r.rec.get("state.List")); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pool-a/vf2 PHASE_PREPARED uid-c2 pod=uid-db if= pd"}, rowSummary(r.mem.snapshot())); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
}

// TestRun_PicksUpFreeingFailedRows: rows left FREEING_FAILED before a
// restart (one an intent, with no prepared device) are retried.
func TestRun_PicksUpFreeingFailedRows(t *testing.T) {
	intent := row("c1", "web", "dummy0", preparing, nil)
	intent.Phase, intent.Attempts = freeingFailed, 7
	r := newRig(t, row("c2", "db", "vf2", freeingFailed, nil), intent)
	r.prov.FreeFunc = failingFree(1)
	runDriver(t, r.d)
	waitFor(t, "every allocation to go", func() bool { return len(r.mem.snapshot()) == 0 })
	want := []string{
		"prov.Free dummy0", "state.MarkFreeFailed pool-a/dummy0",
		"prov.Free vf2", "state.DeleteAllocation pool-a/vf2",
		"prov.Free dummy0", "state.DeleteAllocation pool-a/dummy0",
	}
	if diff := cmp.Diff(want, r.rec.get("state.List")); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestRun_StateUnreachable: the loop keeps trying to list, with backoff,
// and frees the row once the state service answers.
func TestRun_StateUnreachable(t *testing.T) {
	r := newRig(t, row("c1", "web", "vf1", freeingFailed, nil))
	list := r.state.ListAllocationsFunc
	var failures atomic.Int32
	r.state.ListAllocationsFunc = func(in *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
		if failures.Add(1) <= 3 {
			return nil, status.Error(codes.Unavailable, "state service down")
		}
		return list(in)
	}
	runDriver(t, r.d)
	waitFor(t, "the allocation to go", func() bool { return len(r.mem.snapshot()) == 0 })
	want := []string{"prov.Free vf1", "state.DeleteAllocation pool-a/vf1"}
	if diff := cmp.Diff(want, r.rec.get("state.List")); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestRun_StopsWithContext(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.d.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestBackoff(t *testing.T) {
	r := newRig(t)
	r.d.retryBase, r.d.retryMax = time.Second, time.Minute
	for _, tt := range []struct {
		attempts uint32
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {7, time.Minute}, {1000, time.Minute}} {
		if got := r.d.backoff(tt.attempts); got != tt.want {
			t.Errorf("backoff(%d) = %v, want %v", tt.attempts, got, tt.want)
		}
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil || err.Error() != "driver config: [Claims DriverName NodeName Provisioner State] required" {
		t.Errorf("New(empty) = %v", err)
	}
	r := newRig(t)
	if err := r.d.WatchHealthStatus(context.Background(), nil); !errors.Is(err, kubeletplugin.ErrHealthNotSupported) {
		t.Errorf("WatchHealthStatus without a source = %v", err)
	}
	var fatal error
	r.d.onFatal = func(err error) { fatal = err }
	r.d.HandleError(context.Background(), errors.New("slice invalid"), "publishing")
	if fatal == nil || fatal.Error() != "publishing: slice invalid" {
		t.Errorf("fatal error = %v", fatal)
	}
	fatal = nil
	r.d.HandleError(context.Background(), kubeletplugin.ErrRecoverable, "publishing")
	if fatal != nil {
		t.Errorf("a recoverable error was fatal: %v", fatal)
	}
}
