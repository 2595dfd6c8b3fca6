//go:build !kernelrig

package server

import (
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// benchVeths is how many veths the host manager offers in the benchmarks,
// as in bench/attach_netns_test.go (64 pods x 8 devices).
const benchVeths = 512

// BenchmarkServer_AttachDetach_Host runs the provisioner's Attach and
// Detach of a pod's host devices (veths, eBPF programs on, a full config)
// in process, as bench's "provisioner" mode does through the socket, with
// the host manager offering 512 veths and rescanning on the link events
// the moves make: the provisioner's own cost per device, for profiling
// (go test -cpuprofile). attach-ms and detach-ms are per pod.
func BenchmarkServer_AttachDetach_Host(b *testing.B) {
	for _, devices := range []int{1, 8} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			benchAttachDetach(b, devices)
		})
	}
}

func benchAttachDetach(b *testing.B, devices int) {
	testenv.RequireRoot(b, "creates network namespaces and moves links between them")
	host, pod := nodetest.Netns(b, "nsbh"), nodetest.Netns(b, "nsbp")
	hostPath, podPath := "/var/run/netns/"+host, "/var/run/netns/"+pod
	makeBenchVeths(b, hostPath)

	log := slog.New(slog.DiscardHandler)
	fs := ebpftest.BPFFS(b)
	programs, err := ebpf.New(log, fs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(programs.Close)
	handoff, err := ebpf.NewHandoff(log, fs)
	if err != nil {
		b.Fatal(err)
	}
	mover, err := link.NewMover(log, link.WithHostNetns(hostPath))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mover.Close() })
	sysfs := b.TempDir()
	srv := New(log, Factories{
		Host: func(_ string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			return hostdev.New(log, sysfs, c, hostdev.WithNetns(hostPath), hostdev.WithHandoff(handoff))
		},
	}, mover)
	srv.SetPrograms(programs, programs)
	b.Cleanup(srv.Wait) // the eBPF work Setup and Free leave running
	b.Cleanup(srv.Close)
	ctx := b.Context()
	if _, err := srv.Configure(ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"nsb*"}}}}); err != nil {
		b.Fatal(err)
	}
	var pds []*devicev1.PreparedDevice
	var cfgs []*devicev1.DeviceConfig
	for i := range devices {
		name := benchVeth(i)
		var dev *devicev1.Device
		for deadline := time.Now().Add(10 * time.Second); dev == nil; time.Sleep(10 * time.Millisecond) {
			if d, ok := srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_HOST, name); ok {
				dev = d
			} else if time.Now().After(deadline) {
				b.Fatalf("%s never published", name)
			}
		}
		cfg := &devicev1.DeviceConfig{
			PodIfName:  fmt.Sprintf("net%d", i+1),
			MacAddress: fmt.Sprintf("02:bb:00:00:00:%02x", i),
			Mtu:        1400,
			Addresses:  []string{fmt.Sprintf("10.%d.0.2/24", 10+i), fmt.Sprintf("fd00:%x::2/64", 10+i)},
			Routes:     []*devicev1.Route{{Destination: fmt.Sprintf("10.%d.0.0/16", 200+i), Gateway: fmt.Sprintf("10.%d.0.1", 10+i)}},
		}
		resp, err := srv.Setup(ctx, setupOf(dev, cfg))
		if err != nil {
			b.Fatal(err)
		}
		pds, cfgs = append(pds, resp.GetPreparedDevice()), append(cfgs, cfg)
	}
	var attach, detach time.Duration
	for b.Loop() {
		t0 := time.Now()
		for i, pd := range pds {
			if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfgs[i]}); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for i, pd := range pds {
			if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfgs[i]}); err != nil {
				b.Fatal(err)
			}
		}
		attach, detach = attach+t1.Sub(t0), detach+time.Since(t1)
	}
	b.ReportMetric(float64(attach.Microseconds())/1000/float64(b.N), "attach-ms")
	b.ReportMetric(float64(detach.Microseconds())/1000/float64(b.N), "detach-ms")
	for i, pd := range pds {
		if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfgs[i]}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchVeth(i int) string { return fmt.Sprintf("nsb%03d", i) }

// makeBenchVeths creates benchVeths veths (down, MTU 1500, a fixed MAC)
// with their peers in the netns at path.
func makeBenchVeths(b *testing.B, path string) {
	b.Helper()
	h := netnstest.Handle(b, path)
	for i := range benchVeths {
		mac, _ := net.ParseMAC(fmt.Sprintf("02:aa:00:00:%02x:%02x", i>>8, i&0xff))
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: benchVeth(i), MTU: 1500, HardwareAddr: mac},
			PeerName: fmt.Sprintf("nsp%03d", i)}
		if err := h.LinkAdd(v); err != nil {
			b.Fatalf("adding veth %s: %v", v.Name, err)
		}
	}
}
