package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/prometheus/client_golang/prometheus"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// node is the real state service and provisioner, the latter in a
// throwaway "host" netns with veth devices offered by its host manager.
type node struct {
	hostNS      string
	state       statev1.StateServiceClient
	provisioner provisionerv1.ProvisionerServiceClient
	prov        *nodetest.Proc
}

func startNode(t *testing.T, devices ...string) *node {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	dir := nodetest.Dir(t)
	n := &node{hostNS: nodetest.Netns(t, "ndh")}
	for i, d := range devices {
		nodetest.IP(t, "-n", n.hostNS, "link", "add", d, "address", fmt.Sprintf("02:00:00:00:01:%02x", i), "mtu", "1500",
			"type", "veth", "peer", "name", "peer-"+d)
	}
	st := nodetest.Start(t, "state", dir, "", "-db", dir+"/state.db")
	n.prov = nodetest.Start(t, "provisioner", dir, n.hostNS)
	sc, err := rpc.Dial(st.Socket)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := rpc.Dial(n.prov.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); pc.Close() })
	n.state, n.provisioner = statev1.NewStateServiceClient(sc), provisionerv1.NewProvisionerServiceClient(pc)
	ctx := ctxT(t)
	if _, err := n.provisioner.Configure(ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: devices}}}); err != nil {
		t.Fatal(err)
	}
	return n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// prepare does what dra does at prepare: intent, setup, commit.
func (n *node) prepare(t *testing.T, podUID, dev string, cfg *devicev1.DeviceConfig) {
	t.Helper()
	ctx := ctxT(t)
	a := &statev1.Allocation{Pool: "p", DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		ClaimUid: "claim-" + dev, ClaimNamespace: "default", ClaimName: "c-" + dev, PodUid: podUID, Config: cfg}
	if _, err := n.state.BeginPrepare(ctx, &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}}); err != nil {
		t.Fatal(err)
	}
	var pd *devicev1.PreparedDevice
	for deadline := time.Now().Add(20 * time.Second); pd == nil; time.Sleep(50 * time.Millisecond) {
		resp, err := n.provisioner.Setup(ctx, &provisionerv1.SetupRequest{
			DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, Config: cfg, Pool: "p"})
		if err == nil {
			pd = resp.GetPreparedDevice()
		} else if time.Now().After(deadline) {
			t.Fatalf("Setup %s: %v", dev, err)
		}
	}
	if _, err := n.state.CommitPrepare(ctx, &statev1.CommitPrepareRequest{ClaimUid: a.GetClaimUid(),
		Allocations: []*statev1.PreparedAllocation{{Key: &statev1.AllocationKey{Pool: "p", DeviceName: dev}, PreparedDevice: pd}}}); err != nil {
		t.Fatal(err)
	}
}

func (n *node) phase(t *testing.T, dev string) statev1.Phase {
	t.Helper()
	resp, err := n.state.ListAllocations(ctxT(t), &statev1.ListAllocationsRequest{DeviceName: dev})
	if err != nil || len(resp.GetAllocations()) != 1 {
		t.Fatalf("allocation of %s: %v %v", dev, resp, err)
	}
	return resp.GetAllocations()[0].GetPhase()
}

type ipLink struct {
	IfName    string `json:"ifname"`
	Address   string `json:"address"`
	MTU       int    `json:"mtu"`
	AddrInfos []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Scope     string `json:"scope"`
	} `json:"addr_info"`
}

// link returns the link as `ip -j addr` shows it in ns, or ok=false.
func link(t *testing.T, ns, name string) (l ipLink, ok bool) {
	out, err := exec.Command("ip", "-n", ns, "-j", "addr", "show", "dev", name).Output()
	if err != nil {
		return l, false
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j addr: %v %s", err, out)
	}
	return links[0], true
}

func hasAddr(l ipLink, cidr string) bool {
	for _, a := range l.AddrInfos {
		if fmt.Sprintf("%s/%d", a.Local, a.PrefixLen) == cidr {
			return true
		}
	}
	return false
}

// pluginFor connects the real plugin to a real NRI runtime side and returns
// the runtime, ready for events, and the plugin. With gate, the plugin
// hands the containers' wait to its gate hook, the real netdra-hook
// binary, as the DaemonSet runs it.
func pluginFor(t *testing.T, n *node, gate bool) (*adaptation.Adaptation, *Plugin) {
	t.Helper()
	dir := shortDir(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	p := New(log, n.state, n.provisioner, prometheus.NewRegistry())
	t.Cleanup(p.Wait)
	if gate {
		sock := filepath.Join(dir, "gate.sock")
		ln, err := rpc.Listen(sock)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			_ = gatehook.Server{Wait: p.GateWait, Admit: rpc.AdmitUIDs(sock, nil), Warn: log.Warn}.Serve(ctx, ln)
			close(done)
		}()
		t.Cleanup(func() { cancel(); <-done })
		p.WithGate(Gate{Hook: nodetest.Hook(t), Socket: sock})
	}
	rt := startRuntime(t, dir)
	t.Cleanup(rt.r.Stop)
	serve(t, p, dir)
	blk := rt.waitPlugin(t)
	t.Cleanup(blk.Unblock)
	return rt.r, p
}

// TestIntegration_AttachDetach: the real chain on host veths: run puts the
// device into the pod netns under its pod name with MAC and addresses,
// which the container's gate hook (netdra-hook) waits for; stop brings
// it back under its original name, MAC and MTU.
func TestIntegration_AttachDetach(t *testing.T) {
	n := startNode(t, "data0")
	podNS := nodetest.Netns(t, "ndp")
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:00:00:00:bb:01", Mtu: 1400, Addresses: []string{"10.30.0.2/24", "fd00:30::2/64"}}
	n.prepare(t, "pod1", "data0", cfg)
	before, _ := link(t, n.hostNS, "data0")
	rt, p := pluginFor(t, n, true)
	ctx := ctxT(t)

	sb := pod("pod1", "/var/run/netns/"+podNS)
	if err := rt.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if err := createContainer(ctx, rt, sb); err != nil {
		t.Fatalf("creating the container: %v", err)
	}
	in, ok := link(t, podNS, "net1")
	if !ok {
		t.Fatal("net1 is not in the pod netns")
	}
	if in.Address != "02:00:00:00:bb:01" || in.MTU != 1400 || !hasAddr(in, "10.30.0.2/24") || !hasAddr(in, "fd00:30::2/64") {
		t.Errorf("in the pod: %+v", in)
	}
	if _, ok := link(t, n.hostNS, "data0"); ok {
		t.Error("data0 is still in the host netns")
	}
	if got := n.phase(t, "data0"); got != statev1.Phase_PHASE_ATTACHED {
		t.Errorf("phase %v, want ATTACHED", got)
	}

	// The stop event of some runtimes carries no netns: the cached one is used.
	if err := rt.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: pod("pod1", "")}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	p.Wait()
	after, ok := link(t, n.hostNS, "data0")
	if !ok {
		t.Fatal("data0 is not back in the host netns")
	}
	if after.Address != before.Address || after.MTU != before.MTU {
		t.Errorf("data0 back as %s/%d, want %s/%d", after.Address, after.MTU, before.Address, before.MTU)
	}
	if got := n.phase(t, "data0"); got != statev1.Phase_PHASE_PREPARED {
		t.Errorf("phase %v, want PREPARED", got)
	}
}

// TestIntegration_SecondDeviceFails: the second device's name clashes in
// the pod; the container's gate hook refuses it, naming the device, and
// the first device is back in the host.
func TestIntegration_SecondDeviceFails(t *testing.T) {
	n := startNode(t, "data0", "data1")
	podNS := nodetest.Netns(t, "ndp")
	nodetest.IP(t, "-n", podNS, "link", "add", "net2", "type", "veth", "peer", "name", "other")
	n.prepare(t, "pod1", "data0", &devicev1.DeviceConfig{PodIfName: "net1"})
	n.prepare(t, "pod1", "data1", &devicev1.DeviceConfig{PodIfName: "net2"})
	rt, p := pluginFor(t, n, true)
	sb := pod("pod1", "/var/run/netns/"+podNS)
	if err := rt.RunPodSandbox(ctxT(t), &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	err := createContainer(ctxT(t), rt, sb)
	if err == nil || !strings.Contains(err.Error(), "data1") || !strings.Contains(err.Error(), "net2") {
		t.Fatalf("creating the container = %v, want a refusal naming data1 and net2", err)
	}
	p.Wait()
	for _, d := range []string{"data0", "data1"} {
		if _, ok := link(t, n.hostNS, d); !ok {
			t.Errorf("%s is not in the host netns", d)
		}
		if got := n.phase(t, d); got != statev1.Phase_PHASE_PREPARED {
			t.Errorf("%s phase %v, want PREPARED", d, got)
		}
	}
	if _, ok := link(t, podNS, "net1"); ok {
		t.Error("net1 was left in the pod")
	}
}

// TestIntegration_ProvisionerDown: with the provisioner gone, the
// container is refused (CreateContainer waits, without a gate hook) with a
// clear error within the runtime's timeout, and nothing moves; the
// provisioner back, the next creation starts.
func TestIntegration_ProvisionerDown(t *testing.T) {
	n := startNode(t, "data0")
	podNS := nodetest.Netns(t, "ndp")
	n.prepare(t, "pod1", "data0", &devicev1.DeviceConfig{PodIfName: "net1"})
	rt, p := pluginFor(t, n, false)
	n.prov.Kill()

	sb := pod("pod1", "/var/run/netns/"+podNS)
	if err := rt.RunPodSandbox(ctxT(t), &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	start := time.Now()
	err := createContainer(ctxT(t), rt, sb)
	if err == nil || !strings.Contains(err.Error(), "data0") {
		t.Fatalf("creating the container with the provisioner down = %v, want a refusal naming the device", err)
	}
	t.Logf("the runtime got, after %v: %v", time.Since(start), err)
	if _, ok := link(t, n.hostNS, "data0"); !ok {
		t.Error("data0 left the host netns")
	}
	if got := n.phase(t, "data0"); got != statev1.Phase_PHASE_PREPARED {
		t.Errorf("phase %v, want PREPARED", got)
	}
	n.prov.Restart()
	p.Wait()
	if err := createContainer(ctxT(t), rt, sb); err != nil {
		t.Fatalf("creating the container with the provisioner back: %v", err)
	}
	if _, ok := link(t, podNS, "net1"); !ok {
		t.Error("net1 is not in the pod netns")
	}
}
