package bench

import (
	"testing"
	"time"

	"github.com/netdra/netdra/bench/fakesysfs"
	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/services/provisioner/sriov"
)

// BenchmarkSriov_Discover_1024VFs times one sr-iov discovery (what the
// provisioner's sr-iov manager runs at start and on every rescan) of the
// fake sysfs tree of 1,024 VFs that BenchmarkWorld_Inventory_1024VFs
// publishes: the provisioner's share of that publication.
func BenchmarkSriov_Discover_1024VFs(b *testing.B) {
	root := b.TempDir()
	must(b, fakesysfs.Write(root, fakesysfs.PFs, fakesysfs.VFsPerPF))
	var took []time.Duration
	for b.Loop() {
		t0 := time.Now()
		devs, err := sriov.Discover(root)
		took = append(took, time.Since(t0))
		if err != nil || len(devs) != fakesysfs.PFs*fakesysfs.VFsPerPF {
			b.Fatalf("Discover: %d VFs, %v", len(devs), err)
		}
	}
	s := figures.Summarize(took)
	b.ReportMetric(s.P50, "discover-p50-ms")
	s.Samples = nil
	must(b, figures.Record(figures.DiscoverFile, s))
}
