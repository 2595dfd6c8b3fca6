//go:build !kernelrig

package link

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/netdra/netdra/bench/figures"
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// BenchmarkAttach_Settings times one veth's attach and detach with a
// baseline config (the name and two addresses) and with the baseline plus
// one group of the pod network settings at a time (networkCfg's: its
// routes, rules, permanent neighbours, sysctls, link settings, ethtool
// features), then all of them. The VRF is left out: the host kernel has
// no vrf module. attach-ms and detach-ms are the means; with
// $NETDRA_BENCH_OUT set they are recorded (bench/figures.SettingsFile)
// for `make bench`'s report, which sets each against the baseline
// measured in the same run.
func BenchmarkAttach_Settings(b *testing.B) {
	full := networkCfg()
	base := &devicev1.DeviceConfig{PodIfName: full.PodIfName, Addresses: full.Addresses}
	with := func(f func(c *devicev1.DeviceConfig)) *devicev1.DeviceConfig {
		c := proto.CloneOf(base)
		f(c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  *devicev1.DeviceConfig
	}{
		{"baseline", base},
		{"routes", with(func(c *devicev1.DeviceConfig) { c.Routes = full.Routes })},
		{"rules", with(func(c *devicev1.DeviceConfig) { c.Rules = full.Rules })},
		{"neighbors", with(func(c *devicev1.DeviceConfig) { c.Neighbors = full.Neighbors })},
		{"sysctls", with(func(c *devicev1.DeviceConfig) {
			c.LinkSettings = &devicev1.LinkSettings{Sysctls: full.LinkSettings.Sysctls}
		})},
		{"link-settings", with(func(c *devicev1.DeviceConfig) {
			ls := full.LinkSettings
			c.LinkSettings = &devicev1.LinkSettings{Txqueuelen: ls.Txqueuelen, GsoMaxSize: ls.GsoMaxSize, GroMaxSize: ls.GroMaxSize}
		})},
		{"features", with(func(c *devicev1.DeviceConfig) {
			c.LinkSettings = &devicev1.LinkSettings{Features: full.LinkSettings.Features}
		})},
		{"all", full},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRig(b)
			netnstest.AddVeth(b, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			orig, err := r.mover.Snapshot(b.Context(), "ndv0")
			if err != nil {
				b.Fatal(err)
			}
			if orig.Settings, err = r.mover.ReadSettings(b.Context(), "ndv0", tc.cfg.GetLinkSettings()); err != nil {
				b.Fatal(err)
			}
			var attach, detach time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := r.mover.Attach(b.Context(), "ndv0", orig, r.podPath, tc.cfg); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := r.mover.Detach(b.Context(), orig, r.podPath, tc.cfg); err != nil {
					b.Fatal(err)
				}
				attach, detach = attach+t1.Sub(t0), detach+time.Since(t1)
			}
			rec := figures.Settings{Setting: tc.name, N: b.N,
				AttachMs: float64(attach.Microseconds()) / 1000 / float64(b.N), DetachMs: float64(detach.Microseconds()) / 1000 / float64(b.N)}
			b.ReportMetric(rec.AttachMs, "attach-ms")
			b.ReportMetric(rec.DetachMs, "detach-ms")
			if err := figures.Record(figures.SettingsFile, rec); err != nil {
				b.Fatal(err)
			}
		})
	}
}
