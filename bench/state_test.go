package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/rpc"
)

// BenchmarkState_Prepare_SocketVsDirect measures a claim's prepare
// bookkeeping (BeginPrepare + CommitPrepare + DeleteAllocation, each an
// fsynced bbolt write) through the state service's unix socket, against the
// same calls on the store in-process, interleaved in one loop. The
// socket/direct ratio is the cost of running state as its own process.
func BenchmarkState_Prepare_SocketVsDirect(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	direct, err := store.Open(filepath.Join(b.TempDir(), "direct.db"), log)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	served, err := store.Open(filepath.Join(b.TempDir(), "served.db"), log)
	if err != nil {
		b.Fatal(err)
	}
	defer served.Close()
	dir, err := os.MkdirTemp("", "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: filepath.Join(dir, "state.sock"), Logger: log})
	statev1.RegisterStateServiceServer(srv.GRPC(), api.New(served))
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() { srv.Stop(); <-done }()
	conn, err := rpc.Dial(filepath.Join(dir, "state.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := statev1.NewStateServiceClient(conn)
	ctx := context.Background()

	viaSocket := stateOps{
		begin:  func(r *statev1.BeginPrepareRequest) error { _, err := client.BeginPrepare(ctx, r); return err },
		commit: func(r *statev1.CommitPrepareRequest) error { _, err := client.CommitPrepare(ctx, r); return err },
		del:    func(r *statev1.DeleteAllocationRequest) error { _, err := client.DeleteAllocation(ctx, r); return err },
	}
	inProcess := stateOps{
		begin:  func(r *statev1.BeginPrepareRequest) error { _, err := direct.BeginPrepare(r); return err },
		commit: func(r *statev1.CommitPrepareRequest) error { _, err := direct.CommitPrepare(r); return err },
		del:    func(r *statev1.DeleteAllocationRequest) error { _, err := direct.DeleteAllocation(r); return err },
	}
	// Warm the connection.
	if err := viaSocket.prepare(0); err != nil {
		b.Fatal(err)
	}
	var socketTime, directTime time.Duration
	i := 1
	for b.Loop() {
		t0 := time.Now()
		if err := inProcess.prepare(i); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := viaSocket.prepare(i); err != nil {
			b.Fatal(err)
		}
		directTime += t1.Sub(t0)
		socketTime += time.Since(t1)
		i++
	}
	n := float64(b.N)
	b.ReportMetric(float64(directTime.Microseconds())/n, "direct-us/claim")
	b.ReportMetric(float64(socketTime.Microseconds())/n, "socket-us/claim")
	b.ReportMetric(float64(socketTime)/float64(directTime), "socket/direct")
}

type stateOps struct {
	begin  func(*statev1.BeginPrepareRequest) error
	commit func(*statev1.CommitPrepareRequest) error
	del    func(*statev1.DeleteAllocationRequest) error
}

func (o stateOps) prepare(i int) error {
	claim, dev := fmt.Sprintf("claim-%d", i), fmt.Sprintf("dev%d", i)
	key := &statev1.AllocationKey{Pool: "pool", DeviceName: dev}
	err := o.begin(&statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{{
		Pool: "pool", DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, ClaimUid: claim, PodUid: "pod",
		Config: &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"10.0.0.2/24"}}}}})
	if err != nil {
		return err
	}
	err = o.commit(&statev1.CommitPrepareRequest{ClaimUid: claim, Allocations: []*statev1.PreparedAllocation{{
		Key: key, PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: dev, KernelIfName: dev}}}}})
	if err != nil {
		return err
	}
	return o.del(&statev1.DeleteAllocationRequest{Key: key, ClaimUid: claim})
}

// BenchmarkState_ConcurrentWrites measures the store's fsynced writes
// (BeginPrepare, CommitPrepare, DeleteAllocation of one device each) from
// 8 and 64 writers at once against one writer, in one run: writes/s at
// concurrency over writes/s alone. Writes queued behind a commit are
// committed as one group (one fsync pair), so the ratio grows with the
// writers; one fsync pair per write kept it near 1.
func BenchmarkState_ConcurrentWrites(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	s, err := store.Open(filepath.Join(b.TempDir(), "state.db"), log)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ops := stateOps{
		begin:  func(r *statev1.BeginPrepareRequest) error { _, err := s.BeginPrepare(r); return err },
		commit: func(r *statev1.CommitPrepareRequest) error { _, err := s.CommitPrepare(r); return err },
		del:    func(r *statev1.DeleteAllocationRequest) error { _, err := s.DeleteAllocation(r); return err },
	}
	const perWriter = 12
	next := 0
	// rate runs perWriter prepares on each of n writers at once and
	// returns the writes per second (3 a prepare).
	rate := func(n int) float64 {
		errs := make(chan error, n)
		start := time.Now()
		for w := range n {
			base := next + w*perWriter
			go func() {
				for i := range perWriter {
					if err := ops.prepare(base + i); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		next += n * perWriter
		return float64(3*n*perWriter) / time.Since(start).Seconds()
	}
	var alone, at8, at64 float64
	for b.Loop() {
		alone += rate(1)
		at8 += rate(8)
		at64 += rate(64)
	}
	b.ReportMetric(alone/float64(b.N), "writes/s-1")
	b.ReportMetric(at8/alone, "x-8-writers")
	b.ReportMetric(at64/alone, "x-64-writers")
}
