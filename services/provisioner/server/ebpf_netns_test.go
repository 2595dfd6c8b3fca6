//go:build !kernelrig

// These tests need the host kernel (tcx, 6.6+) and iproute2; the kernel
// rig (6.1, busybox) runs ebpf_kernel_test.go instead.

package server

// The provisioner's eBPF on this machine's kernel, through the service's
// API: a host interface (one end of a veth in a throwaway namespace that
// stands in for the host's, the other end in a "wire" namespace) handed
// off clean, with software VLAN, spoof check and counters in the pod.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cmp "github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// ebpfWorld is a provisioner with the host manager and eBPF, its host
// netns a throwaway one holding eth1, whose veth peer wire0 is in a wire
// netns.
type ebpfWorld struct {
	srv              *Server
	host, wire, pod  string // netns names
	programs         *ebpf.Programs
	handoff          *ebpf.Handoff
	hostMAC, podMAC  net.HardwareAddr
	hostPath, podDir string
	bpffs            string
	log              *slog.Logger
}

func newEBPFWorld(t *testing.T, keepPools ...string) *ebpfWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	w := &ebpfWorld{host: nodetest.Netns(t, "ndhost"), wire: nodetest.Netns(t, "ndwire"), pod: nodetest.Netns(t, "ndpod")}
	w.hostPath = "/var/run/netns/" + w.host
	for _, ns := range []string{w.host, w.wire, w.pod} {
		nodetest.IP(t, "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	w.hostMAC, _ = net.ParseMAC("02:00:00:00:01:01")
	w.podMAC, _ = net.ParseMAC("02:00:00:00:02:02")
	nodetest.IP(t, "-n", w.host, "link", "add", "eth1", "address", w.hostMAC.String(), "type", "veth", "peer", "name", "wire0", "netns", w.wire)
	nodetest.IP(t, "-n", w.wire, "link", "set", "wire0", "up")

	w.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w.bpffs = ebpftest.BPFFS(t)
	w.start(t, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth1"}, KeepEbpfProgramsPools: keepPools}}})
	return w
}

// start starts a provisioner (its eBPF, mover and server) on the world's
// host netns and bpffs, configured with req: the world's first, or one
// after the last was killed (kill).
func (w *ebpfWorld) start(t *testing.T, req *provisionerv1.ConfigureRequest) {
	t.Helper()
	log := w.log
	var err error
	if w.programs, err = ebpf.New(log, w.bpffs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.programs.Close)
	if w.handoff, err = ebpf.NewHandoff(log, w.bpffs); err != nil {
		t.Fatal(err)
	}
	mover, err := link.NewMover(log, link.WithHostNetns(w.hostPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	sysfs := t.TempDir()
	w.srv = New(log, Factories{
		Host: func(_ string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			return hostdev.New(log, sysfs, c, hostdev.WithNetns(w.hostPath), hostdev.WithHandoff(w.handoff))
		},
	}, mover)
	w.srv.SetPrograms(w.programs, w.programs)
	w.srv.SetSweeper(w.programs)
	t.Cleanup(w.srv.Wait) // the eBPF work Setup and Free leave running
	t.Cleanup(w.srv.Close)
	if _, err := w.srv.Configure(ctxFor(t), req); err != nil {
		t.Fatal(err)
	}
}

func (w *ebpfWorld) device(t *testing.T) *devicev1.Device {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dev, ok := w.srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_HOST, "eth1"); ok {
			return dev
		}
		if time.Now().After(deadline) {
			t.Fatal("eth1 never published")
		}
	}
}

// hostProgram attaches a program of the host's to eth1 with tcx.
func (w *ebpfWorld) hostPrograms(t *testing.T) (ingress, egress []uint32) {
	t.Helper()
	in, eg := ebpftest.TCX(t, w.host, "eth1")
	for _, id := range in {
		ingress = append(ingress, uint32(id))
	}
	for _, id := range eg {
		egress = append(egress, uint32(id))
	}
	return ingress, egress
}

func TestEBPF_HostInterfaceEndToEnd(t *testing.T) {
	w := newEBPFWorld(t)
	ctx := ctxFor(t)
	// The host (a CNI agent, say) has a program on eth1.
	agent := ebpftest.PassProgram(t, "agent")
	agentID := ebpftest.AttachTCXRaw(t, w.host, "eth1", agent, true)

	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: w.podMAC.String(),
		Vlan: new(uint32(100)), VlanQos: new(uint32(2)), SpoofChk: new(true)}
	setup, err := w.srv.Setup(ctx, withPool(setupOf(w.device(t), cfg), "uplinks"))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	want := []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: agentID, Name: "agent"}}
	if diff := cmp.Diff(want, pd.GetDetachedEbpfPrograms(), protocmp.Transform(), protocmp.IgnoreFields(&devicev1.EbpfProgram{}, "pin")); diff != "" {
		t.Errorf("detached programs in the prepared device (-want +got):\n%s", diff)
	}
	// Setup puts netdra's programs on in the background (armPrograms):
	// whether they are on yet or not, the host's is off.
	if in, _ := w.hostPrograms(t); slices.Contains(in, agentID) {
		t.Errorf("the host's program still on eth1 after Setup: ingress %v", in)
	}
	armedIn, armedEg := w.hostPrograms(t)
	for deadline := time.Now().Add(20 * time.Second); len(armedIn)+len(armedEg) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		armedIn, armedEg = w.hostPrograms(t)
	}
	if len(armedIn) != 1 || len(armedEg) != 1 {
		t.Fatalf("netdra's programs on eth1 in the host after Setup: ingress %v egress %v, want one each", armedIn, armedEg)
	}

	podPath := "/var/run/netns/" + w.pod
	if _, err := w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	ebpftest.WaitOperational(t, w.pod, "net1")
	ebpftest.WaitOperational(t, w.wire, "wire0")
	in, eg := ebpftest.TCX(t, w.pod, "net1")
	if len(in) != 1 || len(eg) != 1 || uint32(in[0]) != armedIn[0] || uint32(eg[0]) != armedEg[0] {
		t.Fatalf("programs on net1 in the pod: ingress %v egress %v, want the ones Setup put on in the host (%v %v): tcx keeps them through the move", in, eg, armedIn, armedEg)
	}

	// Traffic both ways: tagged on the wire, untagged in the pod.
	other, _ := net.ParseMAC("02:00:00:00:09:09")
	onWire, err := ebpftest.Listen(w.wire, "wire0")
	if err != nil {
		t.Fatal(err)
	}
	defer onWire.Close()
	inPod, err := ebpftest.ListenDelivered(w.pod, "net1")
	if err != nil {
		t.Fatal(err)
	}
	defer inPod.Close()
	dropped, err := ebpftest.Send(w.pod, "net1", ebpftest.Frame{Src: w.podMAC, Seq: 1}, ebpftest.Frame{Src: other, Seq: 2}, ebpftest.Frame{Src: w.podMAC, Seq: 3})
	if err != nil || dropped != 1 {
		t.Fatalf("sending from the pod: %d dropped (want 1, the spoofed frame), %v", dropped, err)
	}
	got, err := onWire.Until(3, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range got {
		if want := []byte{1, 3}[min(i, 1)]; f.Seq != want || !f.Tagged || f.TPID != 0x8100 || f.TCI != 100|2<<13 {
			t.Errorf("frame %d on the wire: %+v, want seq %d tagged 0x8100 TCI %#x", i, f, want, 100|2<<13)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d frames on the wire, want 2", len(got))
	}
	if _, err := ebpftest.Send(w.wire, "wire0",
		ebpftest.Frame{Src: other, Seq: 10, Tagged: true, TPID: 0x8100, TCI: 100},
		ebpftest.Frame{Src: other, Seq: 11},
		ebpftest.Frame{Src: other, Seq: 12, Tagged: true, TPID: 0x8100, TCI: 101},
		ebpftest.Frame{Src: other, Seq: 13, Tagged: true, TPID: 0x8100, TCI: 100},
	); err != nil {
		t.Fatal(err)
	}
	got, err = inPod.Until(13, 20*time.Second)
	if err != nil {
		c, cerr := w.srv.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{})
		t.Fatalf("%v (counters: %v %v; net1: %s)", err, c, cerr, nodetest.IP(t, "-n", w.pod, "-d", "-s", "link", "show", "net1"))
	}
	var seqs []byte
	for _, f := range got {
		seqs = append(seqs, f.Seq)
	}
	if diff := cmp.Diff([]byte{10, 13}, seqs); diff != "" {
		t.Errorf("frames in the pod (-want +got):\n%s", diff)
	}

	wantCounters := &provisionerv1.DeviceCounters{Device: "eth1", TxPackets: 2, TxBytes: 120, RxPackets: 2, RxBytes: 112,
		Drops: []*provisionerv1.PolicyDrops{{Policy: "spoofChk", Packets: 1, Bytes: 60}, {Policy: "vlan", Packets: 2, Bytes: 60 + 56}}}
	var counters *provisionerv1.DeviceCountersResponse
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		counters, err = w.srv.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(counters.GetDevices()) == 1 && cmp.Equal(wantCounters, counters.GetDevices()[0], protocmp.Transform()) || time.Now().After(deadline) {
			break
		}
	}
	if diff := cmp.Diff(&provisionerv1.DeviceCountersResponse{Devices: []*provisionerv1.DeviceCounters{wantCounters}}, counters, protocmp.Transform()); diff != "" {
		t.Errorf("DeviceCounters (-want +got):\n%s", diff)
	}

	// Detach: eth1 back in the host with netdra's programs still on (they
	// stay until Free) and not the host's; Free: the host's program back,
	// nothing of netdra's left.
	if _, err := w.srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if inD, egD := w.hostPrograms(t); len(inD) != 1 || len(egD) != 1 || uint32(in[0]) != inD[0] || uint32(eg[0]) != egD[0] {
		t.Errorf("programs on eth1 after Detach: ingress %v egress %v, want netdra's %v %v", inD, egD, in, eg)
	}
	for range 2 { // idempotent
		if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	in2, eg2 := w.hostPrograms(t)
	if diff := cmp.Diff([]uint32{agentID}, in2); diff != "" || len(eg2) != 0 {
		t.Errorf("programs on eth1 after Free: ingress (-want +got):\n%s egress %v", diff, eg2)
	}
	_, err = w.srv.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{Devices: []string{"eth1"}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("DeviceCounters after Free: %v, want NotFound", err)
	}
	for _, root := range []string{w.programs.Root(), w.handoff.Root()} {
		if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
			t.Errorf("left in %s after Free: %v %v", root, ents, err)
		}
	}
}

func TestEBPF_KeepEbpfProgramsPool(t *testing.T) {
	w := newEBPFWorld(t, "keep")
	agentID := ebpftest.AttachTCXRaw(t, w.host, "eth1", ebpftest.PassProgram(t, "agent"), false)
	setup, err := w.srv.Setup(ctxFor(t), withPool(setupOf(w.device(t), nil), "keep"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(setup.GetPreparedDevice().GetDetachedEbpfPrograms()); n != 0 {
		t.Errorf("%d programs detached for a pool that keeps them", n)
	}
	w.srv.Wait() // netdra's programs go on after Setup, in the background
	if _, eg := w.hostPrograms(t); len(eg) != 2 || eg[0] != agentID {
		t.Errorf("egress programs on eth1: %v, want the host's %d, then netdra's", eg, agentID)
	}
	if _, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
		t.Fatal(err)
	}
	w.srv.Wait()
	if _, eg := w.hostPrograms(t); len(eg) != 1 || eg[0] != agentID {
		t.Errorf("egress programs on eth1 after Free: %v, want the host's %d alone", eg, agentID)
	}
}

// failingPrograms is the real thing whose Attach fails, as a kernel that
// refuses the programs would.
type failingPrograms struct{ *ebpf.Programs }

func (failingPrograms) Attach(context.Context, string, string, string, ebpf.Policy) error {
	return errors.New("the kernel refused the programs")
}

// TestEBPF_AttachFailureMovesTheDeviceBack: a device whose programs cannot
// be attached does not stay in the pod (fail closed): it is back in the
// host as it was.
func TestEBPF_AttachFailureMovesTheDeviceBack(t *testing.T) {
	w := newEBPFWorld(t)
	w.srv.SetPrograms(failingPrograms{w.programs}, w.programs)
	ctx := ctxFor(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(7))}
	setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: "/var/run/netns/" + w.pod, Config: cfg})
	if status.Code(err) != codes.Internal {
		t.Fatalf("Attach = %v, want Internal", err)
	}
	t.Log(err)
	out := nodetest.IP(t, "-n", w.host, "-br", "link", "show", "eth1")
	if want := w.hostMAC.String(); !strings.Contains(out, want) {
		t.Errorf("eth1 back in the host: %q, want its MAC %s", out, want)
	}
	if out := nodetest.IP(t, "-n", w.pod, "-br", "link"); strings.Contains(out, "net1") {
		t.Errorf("net1 left in the pod: %q", out)
	}
}

// TestEBPF_WithoutProgramsRefusesSoftwarePolicy: a provisioner without
// eBPF refuses what only eBPF can enforce, before anything moves.
func TestEBPF_WithoutProgramsRefusesSoftwarePolicy(t *testing.T) {
	w := newEBPFWorld(t)
	w.srv.SetPrograms(nil, nil)
	ctx := ctxFor(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", SpoofChk: new(true)}
	setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: "/var/run/netns/" + w.pod, Config: cfg})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Attach = %v, want FailedPrecondition", err)
	}
	if out := nodetest.IP(t, "-n", w.host, "-br", "link", "show", "eth1"); !strings.Contains(out, "eth1") {
		t.Errorf("eth1 not in the host: %q", out)
	}
}

// TestEBPF_FreeThenSetupAgain: Free takes netdra's programs off in the
// background, holding the device; a Setup of it right after waits for
// that, and the device ends with its own programs once, not twice or none.
func TestEBPF_FreeThenSetupAgain(t *testing.T) {
	w := newEBPFWorld(t)
	ctx := ctxFor(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
	var pd *devicev1.PreparedDevice
	for range 3 {
		setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
		if err != nil {
			t.Fatal(err)
		}
		pd = setup.GetPreparedDevice()
		if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.Wait()
	if in, eg := w.hostPrograms(t); len(in) != 1 || len(eg) != 1 {
		t.Errorf("programs on eth1 after Setup, Free three times and Setup: ingress %v egress %v, want netdra's one each", in, eg)
	}
	if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice(), Config: cfg}); err != nil {
		t.Fatal(err)
	}
	w.srv.Wait()
	if in, eg := w.hostPrograms(t); len(in)+len(eg) != 0 {
		t.Errorf("programs on eth1 after the last Free: ingress %v egress %v, want none", in, eg)
	}
}

// TestEBPF_ProgramsSwitch: the claim's ebpfPrograms. Off (the config's
// ebpfDisabled), a device goes into the pod with no tcx program of
// netdra's on it, in the host after Setup or in the pod after Attach, and
// has no counters; on (the default), it carries netdra's ingress and
// egress programs. Either way nothing of netdra's is left on it after
// Free. Off with a policy only the programs enforce (spoofChk) is refused
// at Attach naming the claim's field, the device left in the host.
func TestEBPF_ProgramsSwitch(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  bool
	}{{"on", false}, {"off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newEBPFWorld(t)
			ctx := ctxFor(t)
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", EbpfDisabled: tc.off}
			setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
			if err != nil {
				t.Fatal(err)
			}
			pd := setup.GetPreparedDevice()
			w.srv.Wait() // netdra's programs go on after Setup, in the background
			want := 1
			if tc.off {
				want = 0
			}
			if in, eg := w.hostPrograms(t); len(in) != want || len(eg) != want {
				t.Errorf("programs on eth1 in the host after Setup: ingress %v egress %v, want %d each", in, eg, want)
			}
			podPath := "/var/run/netns/" + w.pod
			if _, err := w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
				t.Fatal(err)
			}
			if in, eg := ebpftest.TCX(t, w.pod, "net1"); len(in) != want || len(eg) != want {
				t.Errorf("programs on net1 in the pod: ingress %v egress %v, want %d each", in, eg, want)
			}
			_, err = w.srv.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{Devices: []string{"eth1"}})
			if tc.off && status.Code(err) != codes.NotFound || !tc.off && err != nil {
				t.Errorf("DeviceCounters of the attached device: %v, want NotFound with the programs off, counters with them on", err)
			}
			if _, err := w.srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
				t.Fatal(err)
			}
			if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
				t.Fatal(err)
			}
			w.srv.Wait()
			if in, eg := w.hostPrograms(t); len(in)+len(eg) != 0 {
				t.Errorf("programs on eth1 after Free: ingress %v egress %v, want none", in, eg)
			}
		})
	}
	t.Run("off with spoofChk", func(t *testing.T) {
		w := newEBPFWorld(t)
		ctx := ctxFor(t)
		cfg := &devicev1.DeviceConfig{PodIfName: "net1", EbpfDisabled: true, SpoofChk: new(true)}
		setup, err := w.srv.Setup(ctx, setupOf(w.device(t), cfg))
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: "/var/run/netns/" + w.pod, Config: cfg})
		var fe *fielderr.Error
		if !errors.As(err, &fe) || fe.Field != "config.ebpfPrograms" || status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Attach = %v, want InvalidArgument naming config.ebpfPrograms", err)
		}
		if out := nodetest.IP(t, "-n", w.host, "-br", "link", "show", "eth1"); !strings.Contains(out, "eth1") {
			t.Errorf("eth1 not in the host: %q", out)
		}
		if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice(), Config: cfg}); err != nil {
			t.Fatal(err)
		}
	})
}
