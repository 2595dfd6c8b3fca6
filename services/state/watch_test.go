package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// mirror is a client's copy of both tables, kept from the watch stream.
type mirror struct {
	mu     sync.Mutex
	rows   map[string]string
	resets int
}

func (m *mirror) apply(ev *statev1.WatchResponse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.GetType() {
	case statev1.EventType_EVENT_TYPE_RESET:
		m.rows = map[string]string{}
		m.resets++
	case statev1.EventType_EVENT_TYPE_UPSERT:
		k, v := rowOf(ev.GetDevice(), ev.GetAllocation())
		m.rows[k] = v
	case statev1.EventType_EVENT_TYPE_DELETE:
		k, _ := rowOf(ev.GetDevice(), ev.GetAllocation())
		delete(m.rows, k)
	}
	return nil
}

func rowOf(d *devicev1.Device, a *statev1.Allocation) (key, value string) {
	if d != nil {
		return "device " + d.GetName(), d.GetKernelIfName()
	}
	return fmt.Sprintf("alloc %s/%s", a.GetPool(), a.GetDeviceName()), a.GetClaimUid() + " " + a.GetPhase().String()
}

func (m *mirror) snapshot() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k, v := range m.rows {
		out = append(out, k+" = "+v)
	}
	slices.Sort(out)
	return out
}

func render(d *statev1.DumpResponse) []string {
	var out []string
	for _, dev := range d.GetDevices() {
		k, v := rowOf(dev, nil)
		out = append(out, k+" = "+v)
	}
	for _, a := range d.GetAllocations() {
		k, v := rowOf(nil, a)
		out = append(out, k+" = "+v)
	}
	slices.Sort(out)
	return out
}

// waitMirrored waits until the mirror equals the service's tables.
func waitMirrored(t *testing.T, ctx context.Context, client statev1.StateServiceClient, m *mirror) {
	t.Helper()
	var diff string
	for ctx.Err() == nil {
		d, err := client.Dump(ctx, &statev1.DumpRequest{})
		if err == nil {
			if diff = cmp.Diff(render(d), m.snapshot()); diff == "" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("mirror never matched the tables (-tables +mirror):\n%s", diff)
}

func prepare(t *testing.T, ctx context.Context, c statev1.StateServiceClient, claim, dev string) {
	t.Helper()
	_, err := c.BeginPrepare(ctx, &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{{
		Pool: "p", DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, ClaimUid: claim}}})
	if err != nil {
		t.Fatal(err)
	}
}

// watchResuming follows c's Watch stream until ctx ends and returns
// ctx.Err(), as the service's clients do: a broken stream is opened again
// under rpc.Retry from the last numbered event or SYNCED mark applied (a
// snapshot's rows carry revision 0), so apply sees every change once, or
// EVENT_TYPE_RESET and a full snapshot when the service cannot resume.
func watchResuming(ctx context.Context, log *slog.Logger, c statev1.StateServiceClient, apply func(*statev1.WatchResponse) error) error {
	from := &statev1.WatchRequest{}
	return rpc.Retry(ctx, log, "state watch", func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.Watch(ctx, from)
		if err != nil {
			return err
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				return err
			}
			if err := apply(ev); err != nil {
				return err
			}
			if ev.GetRevision() != 0 || ev.GetType() == statev1.EventType_EVENT_TYPE_SYNCED {
				from = &statev1.WatchRequest{Epoch: ev.GetEpoch(), Revision: ev.GetRevision()}
			}
		}
	})
}

// TestWatch_ResumesAcrossRestart keeps one client watching while the state
// process is stopped and started again: the client reconnects by itself and
// ends up with exactly the service's tables, before and after.
func TestWatch_ResumesAcrossRestart(t *testing.T) {
	sock, db := newDirs(t)
	p := startState(t, sock, db)
	client, _ := dialState(t, sock)
	ctx := testCtx(t, time.Minute)

	m := &mirror{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		log := slog.New(slog.NewTextHandler(logWriter{t}, nil))
		done <- watchResuming(watchCtx, log, client, m.apply)
	}()
	defer func() { stopWatch(); <-done }()

	_, err := client.ReplaceDevices(ctx, &statev1.ReplaceDevicesRequest{Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
		Devices: []*devicev1.Device{{Name: "dummy0", KernelIfName: "dummy0"}, {Name: "dummy1", KernelIfName: "dummy1"}}})
	if err != nil {
		t.Fatal(err)
	}
	prepare(t, ctx, client, "c1", "dummy0")
	waitMirrored(t, ctx, client, m)

	p.stop()
	p = startState(t, sock, db)
	// The restarted service has no inventory yet; the allocation is back
	// from the file; new writes reach the same client.
	prepare(t, ctx, client, "c2", "dummy1")
	waitMirrored(t, ctx, client, m)
	if got := m.snapshot(); !slices.Contains(got, "alloc p/dummy0 = c1 PHASE_PREPARING") || slices.Contains(got, "device dummy0 = dummy0") {
		t.Errorf("after restart the mirror holds %q", got)
	}
	m.mu.Lock()
	resets := m.resets
	m.mu.Unlock()
	if resets != 2 {
		t.Errorf("got %d resets, want 2: the first snapshot and the one after the restart", resets)
	}
	p.stop()
}
