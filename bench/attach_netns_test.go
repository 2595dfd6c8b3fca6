package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/bench/figures"
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/ocihooks"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// The attach benchmark's configurations: devices per pod, concurrent
// pods, how many pod lifecycles each concurrent worker runs in a turn, and
// how many turns the baseline and the pipeline (and for 1 pod the
// provisioner and no-hook-exec modes) take in alternation, their samples
// pooled: one run of each after the other would put whatever else the
// machine did in either on one side only, and the ratio would measure the
// machine rather than the code.
var attachConfigs = []struct{ devices, pods, rounds, turns int }{
	{1, 1, 10, 3}, {1, 16, 1, 3}, {1, 64, 1, 3},
	{8, 1, 7, 3}, {8, 16, 1, 2}, {8, 64, 1, 2},
}

const maxPods, maxDevices = 64, 8

// BenchmarkAttach_PipelineVsBaseline measures a pod's attach and detach
// (D devices, each renamed, given a MAC, an MTU, two addresses, a route,
// set up, and one namespace move each way) two ways in the same run:
//
//   - baseline: the netlink calls made directly from this process
//     (vishvananda/netlink), on veths in a throwaway host netns;
//   - pipeline: the real NRI runtime side (containerd's pkg/adaptation, what
//     containerd embeds) sending RunPodSandbox, CreateContainer (attach:
//     until the container may be created, the devices in the pod),
//     StopPodSandbox and RemovePodSandbox (detach: until the devices are
//     back in the host netns) to the real nri process, which asks the real state
//     service and the real provisioner (in its own throwaway host netns) to
//     attach and detach, with the allocations recorded beforehand as dra
//     does at prepare (BeginPrepare, provisioner Setup, CommitPrepare).
//
// For 1 and 8 devices a pod and 1, 16 and 64 concurrent pods (closed loop:
// each worker attaches its pod, detaches it, and starts over) it reports
// the p50 and p99 of attach and detach and the namespace moves a second,
// and writes them for bench/RESULTS.md, with how long each of netdra's
// hooks held the runtime's NRI lock (figures.Hooks). The RSS of the node
// processes idle and under this churn is recorded too, and the moves one
// pod lifecycle makes, counted from the host netns's link events.
func BenchmarkAttach_PipelineVsBaseline(b *testing.B) {
	testenv.RequireRoot(b, "creates network namespaces and moves links between them")
	t0 := time.Now()
	base := newBaseline(b)
	pipe := newPipeline(b)
	b.Logf("set up in %v: 2 x %d veths, %d pod netns, the node processes", time.Since(t0), maxPods*maxDevices, 2*maxPods)
	pipe.recordRSS(b, "idle", "after start, the host manager offering 512 veths, nothing allocated")
	sampler := figures.NewSampler(pipe.pids, 50*time.Millisecond)
	for _, c := range attachConfigs {
		b.Run(fmt.Sprintf("devices=%d/pods=%d", c.devices, c.pods), func(b *testing.B) {
			for b.Loop() {
				pipe.prepare(b, c.devices, c.pods)
				counter := countMoves(b, pipe.hostNS) // the pipeline's host netns: its moves only
				pipe.hooks.take(0, 0)
				var bls, pls, provs, gates []figures.Attach
				for range c.turns {
					bls = append(bls, runLifecycles(b, "baseline", base, c.devices, c.pods, c.rounds))
					pls = append(pls, runLifecycles(b, "pipeline", pipe, c.devices, c.pods, c.rounds))
					if c.pods == 1 {
						// The provisioner's share: its Attach and Detach RPCs alone.
						provs = append(provs, runLifecycles(b, "provisioner", provisionerOnly{pipe}, c.devices, c.pods, c.rounds))
						// The gate hook's process's share.
						gates = append(gates, runLifecycles(b, "no-hook-exec", gateInProcess{pipe}, c.devices, c.pods, c.rounds))
					}
				}
				bl, pl := figures.Pool(bls), figures.Pool(pls)
				pl.MovesCounted = counter.stop()
				reportHooks(b, pipe.hooks.take(c.devices, c.pods))
				if c.pods == 1 {
					must(b, figures.Record(figures.AttachFile, figures.Pool(provs)))
					must(b, figures.Record(figures.AttachFile, figures.Pool(gates)))
				}
				pipe.unprepare(b)
				report(b, bl, pl)
			}
		})
	}
	peak := sampler.Stop()
	for name, pid := range pipe.pids {
		_, hwm, _ := figures.ProcStatus(pid)
		must(b, figures.Record(figures.RSSFile, figures.RSS{Process: name, Phase: "churn", RSSKiB: peak[name], HWMKiB: hwm,
			Context: "peak VmRSS sampled every 50 ms over every pipeline configuration of point 1"}))
	}
}

func report(b *testing.B, bl, pl figures.Attach) {
	b.ReportMetric(bl.Attach.P50, "base-attach-p50-ms")
	b.ReportMetric(pl.Attach.P50, "pipe-attach-p50-ms")
	b.ReportMetric(bl.Attach.P99, "base-attach-p99-ms")
	b.ReportMetric(pl.Attach.P99, "pipe-attach-p99-ms")
	if bl.Attach.P50 > 0 {
		b.ReportMetric(pl.Attach.P50/bl.Attach.P50, "attach-p50-pipe/base")
	}
	if bl.Attach.P99 > 0 {
		b.ReportMetric(pl.Attach.P99/bl.Attach.P99, "attach-p99-pipe/base")
	}
	b.ReportMetric(bl.MovesPerSec, "base-moves/s")
	b.ReportMetric(pl.MovesPerSec, "pipe-moves/s")
	b.ReportMetric(float64(pl.Failures), "pipe-failures")
	must(b, figures.Record(figures.AttachFile, bl))
	must(b, figures.Record(figures.AttachFile, pl))
}

// reportHooks reports how long the hooks held the runtime's NRI lock.
func reportHooks(b *testing.B, h figures.Hooks) {
	b.ReportMetric(h.RunPodSandbox.P50, "run-hook-p50-ms")
	b.ReportMetric(h.RunPodSandbox.P99, "run-hook-p99-ms")
	b.ReportMetric(h.StopPodSandbox.P50, "stop-hook-p50-ms")
	b.ReportMetric(h.StopPodSandbox.P99, "stop-hook-p99-ms")
	b.ReportMetric(h.CreateContainer.P50, "create-hook-p50-ms")
	b.ReportMetric(h.CreateContainer.P99, "create-hook-p99-ms")
	b.ReportMetric(float64(h.Refusals), "create-refusals")
	must(b, figures.Record(figures.HooksFile, h))
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// lifecycler attaches and detaches the devices of worker w's pod: the
// first devices of the worker's veths (hostName(w, i)) into podNS(w).
type lifecycler interface {
	attach(ctx context.Context, w, devices int) error
	detach(ctx context.Context, w, devices int) error
}

// checker is a lifecycler that checks the devices after each attach,
// outside the timed attach and detach.
type checker interface {
	check(w, devices int) error
}

// settler is a lifecycler whose detach ends (the devices back in the
// host) before its bookkeeping does: settle waits, untimed, until that
// ended too, before the worker's next attach. The workers attach the same
// pods again and again, which on a node are new pods (a sandbox is made
// once): a pod's attach waits for the same pod's earlier detach, which a
// new pod's never does.
type settler interface {
	settle(ctx context.Context, w int) error
}

// runLifecycles runs pods workers concurrently, each rounds times attach
// then detach, and summarizes. A failed attach or detach is counted and
// its latency left out; the worker goes on with the next round.
func runLifecycles(b *testing.B, mode string, l lifecycler, devices, pods, rounds int) figures.Attach {
	b.Helper()
	var (
		mu             sync.Mutex
		attach, detach []time.Duration
		failures       int
		firstErr       error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures++
		if firstErr == nil {
			firstErr = err
		}
	}
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range pods {
		wg.Go(func() {
			for range rounds {
				t0 := time.Now()
				if err := l.attach(ctx, w, devices); err != nil {
					fail(fmt.Errorf("attach pod %d: %w", w, err))
					continue
				}
				d := time.Since(t0)
				if c, ok := l.(checker); ok {
					if err := c.check(w, devices); err != nil {
						fail(fmt.Errorf("after the attach of pod %d: %w", w, err))
					}
				}
				t1 := time.Now()
				err := l.detach(ctx, w, devices)
				t2 := time.Now()
				mu.Lock()
				attach = append(attach, d)
				if err == nil {
					detach = append(detach, t2.Sub(t1))
				}
				mu.Unlock()
				if err != nil {
					fail(fmt.Errorf("detach pod %d: %w", w, err))
					continue
				}
				if st, ok := l.(settler); ok {
					if err := st.settle(ctx, w); err != nil {
						fail(fmt.Errorf("after the detach of pod %d: %w", w, err))
					}
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	r := figures.Attach{Mode: mode, Devices: devices, Concurrency: pods, Pods: pods * rounds, Failures: failures,
		Attach: figures.Summarize(attach), Detach: figures.Summarize(detach),
		Moves: devices * (len(attach) + len(detach)), WallSeconds: wall.Seconds()}
	r.MovesPerSec = float64(r.Moves) / wall.Seconds()
	if firstErr != nil {
		r.FirstError = firstErr.Error()
		b.Logf("%s devices=%d pods=%d: %d failures, first: %v", mode, devices, pods, failures, firstErr)
	}
	return r
}

// hostName is the veth offered as device i of worker w's pod.
func hostName(w, i int) string { return fmt.Sprintf("nb%02dd%d", w, i) }

// podConfig is what device i of worker w's pod gets in the pod: a name,
// a MAC, an MTU, an IPv4 and an IPv6 address and a route via a gateway.
func podConfig(w, i int) *devicev1.DeviceConfig {
	return &devicev1.DeviceConfig{
		PodIfName:  fmt.Sprintf("net%d", i+1),
		MacAddress: fmt.Sprintf("02:bb:00:00:%02x:%02x", w, i),
		Mtu:        1400,
		Addresses:  []string{fmt.Sprintf("10.%d.%d.2/24", 10+i, w), fmt.Sprintf("fd00:%x:%x::2/64", 10+i, w)},
		Routes:     []*devicev1.Route{{Destination: fmt.Sprintf("10.%d.0.0/16", 200+i), Gateway: fmt.Sprintf("10.%d.%d.1", 10+i, w)}},
	}
}

// makeVeths creates the veths of every worker in the netns: down, MTU
// 1500, a fixed MAC, their peers beside them.
func makeVeths(b *testing.B, ns string) {
	b.Helper()
	h, err := handleAt(ns)
	must(b, err)
	defer h.Close()
	for w := range maxPods {
		for i := range maxDevices {
			mac, _ := net.ParseMAC(fmt.Sprintf("02:aa:00:00:%02x:%02x", w, i))
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName(w, i), MTU: 1500, HardwareAddr: mac},
				PeerName: fmt.Sprintf("pb%02dd%d", w, i)}
			if err := h.LinkAdd(v); err != nil {
				b.Fatalf("adding veth %s in %s: %v", v.Name, ns, err)
			}
		}
	}
}

func handleAt(ns string) (*netlink.Handle, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("opening netns %s: %w", ns, err)
	}
	defer h.Close()
	return netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
}

// baseline does the netlink work of an attach and a detach directly.
type baseline struct {
	hostNS string
	pods   []string
}

func newBaseline(b *testing.B) *baseline {
	bl := &baseline{hostNS: nodetest.Netns(b, "nbh")}
	for range maxPods {
		bl.pods = append(bl.pods, nodetest.Netns(b, "nbp"))
	}
	makeVeths(b, bl.hostNS)
	return bl
}

// attach does what the provisioner's link.Mover does for each device: in
// the host, down, MAC and MTU; one move; in the pod, the pod name, two
// addresses, up, a route.
func (bl *baseline) attach(_ context.Context, w, devices int) error {
	host, pod, podNs, err := bl.handles(w)
	if err != nil {
		return err
	}
	defer host.Close()
	defer pod.Close()
	defer podNs.Close()
	for i := range devices {
		cfg := podConfig(w, i)
		l, err := host.LinkByName(hostName(w, i))
		if err != nil {
			return err
		}
		mac, _ := net.ParseMAC(cfg.GetMacAddress())
		if err := errors.Join(host.LinkSetDown(l), host.LinkSetHardwareAddr(l, mac), host.LinkSetMTU(l, int(cfg.GetMtu()))); err != nil {
			return err
		}
		// The pod name is taken in the host by the other pods' links, so
		// the link crosses under its host name and is renamed in the pod
		// (what the provisioner's mover does then too).
		if err := host.LinkSetNsFd(l, int(podNs)); err != nil {
			return fmt.Errorf("moving %s: %w", l.Attrs().Name, err)
		}
		if l, err = pod.LinkByName(hostName(w, i)); err != nil {
			return err
		}
		if err := pod.LinkSetName(l, cfg.GetPodIfName()); err != nil {
			return err
		}
		for _, a := range cfg.GetAddresses() {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if err := pod.AddrAdd(l, addr); err != nil {
				return err
			}
		}
		if err := pod.LinkSetUp(l); err != nil {
			return err
		}
		r := cfg.GetRoutes()[0]
		_, dst, _ := net.ParseCIDR(r.GetDestination())
		if err := pod.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.ParseIP(r.GetGateway())}); err != nil {
			return fmt.Errorf("route: %w", err)
		}
	}
	return nil
}

// detach is the way back: in the pod, down, the host's MAC and MTU and the
// host name; one move (the kernel drops addresses and routes).
func (bl *baseline) detach(_ context.Context, w, devices int) error {
	host, pod, podNs, err := bl.handles(w)
	if err != nil {
		return err
	}
	defer host.Close()
	defer pod.Close()
	defer podNs.Close()
	hostNs, err := netns.GetFromName(bl.hostNS)
	if err != nil {
		return err
	}
	defer hostNs.Close()
	for i := range devices {
		l, err := pod.LinkByName(podConfig(w, i).GetPodIfName())
		if err != nil {
			return err
		}
		mac, _ := net.ParseMAC(fmt.Sprintf("02:aa:00:00:%02x:%02x", w, i))
		if err := errors.Join(pod.LinkSetDown(l), pod.LinkSetHardwareAddr(l, mac), pod.LinkSetMTU(l, 1500),
			pod.LinkSetName(l, hostName(w, i))); err != nil {
			return err
		}
		if err := pod.LinkSetNsFd(l, int(hostNs)); err != nil {
			return fmt.Errorf("moving %s back: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

func (bl *baseline) handles(w int) (host, pod *netlink.Handle, podNs netns.NsHandle, err error) {
	if host, err = handleAt(bl.hostNS); err != nil {
		return nil, nil, 0, err
	}
	if podNs, err = netns.GetFromName(bl.pods[w]); err != nil {
		host.Close()
		return nil, nil, 0, err
	}
	if pod, err = netlink.NewHandleAt(podNs, unix.NETLINK_ROUTE); err != nil {
		host.Close()
		podNs.Close()
		return nil, nil, 0, err
	}
	return host, pod, podNs, nil
}

// pipeline drives the real processes through the real NRI runtime side.
type pipeline struct {
	hostNS      string
	pods        []string
	state       statev1.StateServiceClient
	provisioner provisionerv1.ProvisionerServiceClient
	runtime     *adaptation.Adaptation
	// gate is nri's gate socket, which netdra-hook asks.
	gate string
	pids map[string]int
	// set by prepare, for unprepare and the sandboxes
	tag      string
	prepared []*statev1.PreparedAllocation
	configs  []*devicev1.DeviceConfig
	// links follows the host netns's links; hooks collects the hooks'
	// durations.
	links *hostLinks
	hooks hookTimes
}

func newPipeline(b *testing.B) *pipeline {
	p := &pipeline{hostNS: nodetest.Netns(b, "nbh"), pids: map[string]int{}}
	for range maxPods {
		p.pods = append(p.pods, nodetest.Netns(b, "nbp"))
	}
	makeVeths(b, p.hostNS)
	p.links = watchLinks(b, p.hostNS)
	dir := nodetest.Dir(b)
	quiet := []string{"-log-level", "info"}
	st := nodetest.Start(b, "state", dir, "", append(quiet, "-db", dir+"/state.db")...)
	// As the DaemonSet runs it: the pod netns pinned (pods/base).
	prov := nodetest.Start(b, "provisioner", dir, p.hostNS, append(quiet, "-netns-pin-dir", filepath.Join(dir, "pins"))...)
	rtDir := nodetest.Dir(b)
	p.runtime = startRuntime(b, rtDir)
	// As the DaemonSet runs it: with its gate hook, which runc would run.
	nri := nodetest.Start(b, "nri", dir, "", append(quiet, "-state-socket", st.Socket, "-provisioner-socket", prov.Socket,
		"-metrics-address", "", "-nri-socket", filepath.Join(rtDir, "nri.sock"),
		"-gate-hook", nodetest.Hook(b), "-gate-socket", filepath.Join(dir, "nri-gate.sock"))...)
	for _, proc := range []*nodetest.Proc{st, prov, nri} {
		pid, err := figures.FindPID("-socket", proc.Socket)
		must(b, err)
		p.pids[proc.Name] = pid
	}
	sc, err := rpc.Dial(st.Socket)
	must(b, err)
	pc, err := rpc.Dial(prov.Socket)
	must(b, err)
	b.Cleanup(func() { sc.Close(); pc.Close() })
	p.state, p.provisioner = statev1.NewStateServiceClient(sc), provisionerv1.NewProvisionerServiceClient(pc)
	p.gate = filepath.Join(dir, "nri-gate.sock")
	_, err = p.provisioner.Configure(context.Background(), &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"nb*"}}}})
	must(b, err)
	waitPluginSynced(b, p.runtime)
	return p
}

func (p *pipeline) recordRSS(b *testing.B, phase, context string) {
	for name, pid := range p.pids {
		rss, hwm, err := figures.ProcStatus(pid)
		must(b, err)
		must(b, figures.Record(figures.RSSFile, figures.RSS{Process: name, Phase: phase, RSSKiB: rss, HWMKiB: hwm, Context: context}))
	}
}

var prepareSeq int

// prepare records the allocations of the configuration's pods as dra does
// at prepare: BeginPrepare, provisioner Setup, CommitPrepare, one claim a
// device. Pod UIDs are fresh for each configuration.
func (p *pipeline) prepare(b *testing.B, devices, pods int) {
	b.Helper()
	prepareSeq++
	p.tag = "c" + strconv.Itoa(prepareSeq)
	p.prepared, p.configs = nil, nil
	ctx := context.Background()
	for w := range pods {
		for i := range devices {
			dev, cfg := hostName(w, i), podConfig(w, i)
			claim := fmt.Sprintf("%s-claim-%d-%d", p.tag, w, i)
			a := &statev1.Allocation{Pool: "bench", DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
				ClaimUid: claim, ClaimNamespace: "default", ClaimName: claim, PodUid: p.podUID(w), Config: cfg}
			_, err := p.state.BeginPrepare(ctx, &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}})
			must(b, err)
			var pd *devicev1.PreparedDevice
			for deadline := time.Now().Add(30 * time.Second); pd == nil; time.Sleep(50 * time.Millisecond) {
				resp, err := p.provisioner.Setup(ctx, &provisionerv1.SetupRequest{Pool: "bench",
					DeviceName: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, Config: cfg})
				if err == nil {
					pd = resp.GetPreparedDevice()
				} else if time.Now().After(deadline) {
					b.Fatalf("Setup %s: %v", dev, err)
				}
			}
			pa := &statev1.PreparedAllocation{Key: &statev1.AllocationKey{Pool: "bench", DeviceName: dev}, PreparedDevice: pd}
			_, err = p.state.CommitPrepare(ctx, &statev1.CommitPrepareRequest{ClaimUid: claim, Allocations: []*statev1.PreparedAllocation{pa}})
			must(b, err)
			p.prepared, p.configs = append(p.prepared, pa), append(p.configs, cfg)
		}
	}
	p.waitPrograms(b, true)
}

// waitPrograms waits, untimed, until the provisioner's eBPF programs are
// on every prepared device, both ways (on), or none is on any (!on): it puts them on
// and takes them off in the background after Setup and Free, holding the
// kernel's RTNL for each (the baseline's moves and the next configuration
// would wait for them), and a device's attach waits for its programs, as
// on a node, where a pod's sandbox takes longer to start than they do.
// Without them after a minute (a kernel without tcx) it goes on.
func (p *pipeline) waitPrograms(b *testing.B, on bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, pa := range p.prepared {
		for name := pa.GetKey().GetDeviceName(); ; time.Sleep(10 * time.Millisecond) {
			in, eg := ebpftest.TCX(b, p.hostNS, name)
			if on && len(in) > 0 && len(eg) > 0 || !on && len(in)+len(eg) == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Logf("eBPF programs on %s after a minute: ingress %v egress %v, want on %v; going on", name, in, eg, on)
				return
			}
		}
	}
}

// unprepare frees the devices and deletes the allocations, as dra does.
func (p *pipeline) unprepare(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	for i, pa := range p.prepared {
		_, err := p.provisioner.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pa.GetPreparedDevice(), Config: p.configs[i]})
		must(b, err)
		claim := fmt.Sprintf("%s-claim-%s", p.tag, claimSuffix(pa.GetKey().GetDeviceName()))
		_, err = p.state.DeleteAllocation(ctx, &statev1.DeleteAllocationRequest{Key: pa.GetKey(), ClaimUid: claim})
		must(b, err)
	}
	p.waitPrograms(b, false)
}

// claimSuffix turns hostName(w, i) back into "w-i".
func claimSuffix(dev string) string {
	var w, i int
	fmt.Sscanf(dev, "nb%02dd%d", &w, &i)
	return fmt.Sprintf("%d-%d", w, i)
}

func (p *pipeline) podUID(w int) string { return fmt.Sprintf("%s-pod-%d", p.tag, w) }

func (p *pipeline) sandbox(w int) *api.PodSandbox {
	uid := p.podUID(w)
	return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: uid, Namespace: "default", Linux: &api.LinuxPodSandbox{
		Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/var/run/netns/" + p.pods[w]}}}}
}

// attach is RunPodSandbox, then CreateContainer until the runtime lets the
// container be created, as the kubelet does, then the createRuntime hooks
// of its adjustment, run as runc runs them: netdra's RunPodSandbox returns
// at once, and the gate (CreateContainer, or the hook it puts on the
// container while the attach runs) waits for the part of the attach that
// has not ended, so the attach is timed until the devices are in the pod,
// configured (a container sees them), whatever hook returns first. check
// looks at them there after, untimed.
func (p *pipeline) attach(ctx context.Context, w, devices int) error {
	return p.attachThen(ctx, w, ocihooks.Run)
}

// attachThen is attach, with the container's createRuntime hooks run by
// hooks.
func (p *pipeline) attachThen(ctx context.Context, w int, hooks func(context.Context, []*api.Hook) error) error {
	sb := p.sandbox(w)
	t0 := time.Now()
	if err := p.runtime.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
		return err
	}
	p.hooks.add(&p.hooks.run, time.Since(t0))
	for {
		t := time.Now()
		resp, err := p.runtime.CreateContainer(ctx, &adaptation.CreateContainerRequest{Pod: sb,
			Container: &api.Container{Id: "ctr-" + sb.GetUid(), PodSandboxId: sb.GetId(), Name: "app"}})
		p.hooks.add(&p.hooks.create, time.Since(t))
		if err == nil {
			// As the kubelet, the creation is tried again when the
			// hook said the attach has not finished (a burst).
			err = hooks(ctx, resp.GetAdjust().GetHooks().GetCreateRuntime())
			if err == nil {
				return nil
			}
		}
		if !strings.Contains(err.Error(), "has not finished yet") {
			return err
		}
		p.hooks.refused()
	}
}

// check checks, after an attach, that the devices of worker w's pod are in
// its netns, up, under their pod names, and waits until the link events
// of their moves out of the host are in (for detach's clock).
func (p *pipeline) check(w, devices int) error {
	names := make([]string, devices)
	for i := range names {
		names[i] = hostName(w, i)
	}
	if err := p.links.wait(names, false); err != nil {
		return err
	}
	h, err := handleAt(p.pods[w])
	if err != nil {
		return err
	}
	defer h.Close()
	for i := range devices {
		name := podConfig(w, i).GetPodIfName()
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s in the pod after CreateContainer: %w", name, err)
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("%s is down in the pod after CreateContainer", name)
		}
	}
	return nil
}

// detach is StopPodSandbox and RemovePodSandbox, as a runtime sends both
// when a pod ends, timed until the devices are back in the host netns
// (netdra's StopPodSandbox hands the detach off and returns).
func (p *pipeline) detach(ctx context.Context, w, devices int) error {
	names := make([]string, devices)
	for i := range names {
		names[i] = hostName(w, i)
	}
	t0 := time.Now()
	if err := p.runtime.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: p.sandbox(w)}); err != nil {
		return err
	}
	p.hooks.add(&p.hooks.stop, time.Since(t0))
	if err := p.runtime.RemovePodSandbox(ctx, &adaptation.RemovePodSandboxRequest{Pod: p.sandbox(w)}); err != nil {
		return err
	}
	return p.links.wait(names, true)
}

// settle waits until the state has no device of worker w's pod marked
// attached: nri's detach work recorded the detach (MarkDetached) after
// the devices were back in the host, where detach's clock stopped.
func (p *pipeline) settle(ctx context.Context, w int) error {
	wait := 500 * time.Microsecond
	for deadline := time.Now().Add(10 * time.Second); ; {
		rows, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: p.podUID(w), Phase: statev1.Phase_PHASE_ATTACHED})
		switch {
		case err != nil:
			return err
		case len(rows.GetAllocations()) == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d devices still marked attached 10 s after the detach", len(rows.GetAllocations()))
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// hookTimes are the durations of netdra's hooks as the runtime side saw
// them, for one configuration.
type hookTimes struct {
	mu                sync.Mutex
	run, stop, create []time.Duration
	refusals          int
}

func (h *hookTimes) add(to *[]time.Duration, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*to = append(*to, d)
}

func (h *hookTimes) refused() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refusals++
}

// take summarizes the configuration's hook times and starts over.
func (h *hookTimes) take(devices, pods int) figures.Hooks {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := figures.Hooks{Devices: devices, Concurrency: pods, RunPodSandbox: figures.Summarize(h.run),
		StopPodSandbox: figures.Summarize(h.stop), CreateContainer: figures.Summarize(h.create), Refusals: h.refusals}
	h.run, h.stop, h.create, h.refusals = nil, nil, nil, 0
	return r
}

// provisionerOnly calls the provisioner's Attach and Detach directly, one
// device after the other as the nri plugin does: the pipeline without the
// NRI hop and the state service.
// gateInProcess is the pipeline with the gate's wait called from this
// process (gatehook.Ask on nri's gate socket, as netdra-hook asks it)
// where runc would exec netdra-hook: against the pipeline, the share of
// the hook's process.
type gateInProcess struct{ p *pipeline }

func (g gateInProcess) attach(ctx context.Context, w, devices int) error {
	return g.p.attachThen(ctx, w, func(ctx context.Context, hooks []*api.Hook) error {
		if len(hooks) == 0 {
			return nil
		}
		return gatehook.Ask(ctx, g.p.gate, gatehook.Request{PodUID: g.p.podUID(w), Netns: "/var/run/netns/" + g.p.pods[w]}, gatehook.HookTimeout*time.Second)
	})
}

func (g gateInProcess) check(w, devices int) error { return g.p.check(w, devices) }

func (g gateInProcess) settle(ctx context.Context, w int) error { return g.p.settle(ctx, w) }

func (g gateInProcess) detach(ctx context.Context, w, devices int) error {
	return g.p.detach(ctx, w, devices)
}

type provisionerOnly struct{ p *pipeline }

func (o provisionerOnly) attach(ctx context.Context, w, devices int) error {
	for i := range devices {
		pa := o.p.prepared[w*devices+i]
		_, err := o.p.provisioner.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pa.GetPreparedDevice(),
			NetnsPath: "/var/run/netns/" + o.p.pods[w], Config: o.p.configs[w*devices+i]})
		if err != nil {
			return err
		}
	}
	return nil
}

func (o provisionerOnly) detach(ctx context.Context, w, devices int) error {
	for i := range devices {
		pa := o.p.prepared[w*devices+i]
		_, err := o.p.provisioner.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pa.GetPreparedDevice(),
			NetnsPath: "/var/run/netns/" + o.p.pods[w], Config: o.p.configs[w*devices+i]})
		if err != nil {
			return err
		}
	}
	return nil
}

// The NRI runtime side, as containerd embeds it, on a private socket.
var runtimeSynced = make(chan struct{}, 8)

func startRuntime(b *testing.B, dir string) *adaptation.Adaptation {
	b.Helper()
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		runtimeSynced <- struct{}{}
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	must(b, os.MkdirAll(filepath.Join(dir, "plugins"), 0o755))
	r, err := adaptation.New("netdra-bench", "v0", syncFn, update,
		adaptation.WithSocketPath(filepath.Join(dir, "nri.sock")),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	must(b, err)
	must(b, r.Start())
	<-runtimeSynced // Start syncs the (absent) pre-installed plugins once.
	b.Cleanup(r.Stop)
	return r
}

// waitPluginSynced waits until the nri process connected and was
// synchronized, then blocks plugin sync so that events reach it: the
// runtime side adds a plugin only after its sync callback ran for it, and
// silently skips the events it gets before.
func waitPluginSynced(b *testing.B, r *adaptation.Adaptation) {
	b.Helper()
	select {
	case <-runtimeSynced:
	case <-time.After(30 * time.Second):
		b.Fatal("the nri process never connected to the runtime")
	}
	blk := r.BlockPluginSync()
	b.Cleanup(blk.Unblock)
}

// moveCounter counts the namespace moves into and out of a netns from its
// link events: a link that leaves (RTM_DELLINK of a known index) and one
// that arrives (RTM_NEWLINK of an unknown index).
type moveCounter struct {
	mu      sync.Mutex
	known   map[int32]bool
	in, out int
	done    chan struct{}
	ended   chan struct{}
}

func countMoves(b *testing.B, ns string) *moveCounter {
	b.Helper()
	h, err := netns.GetFromName(ns)
	must(b, err)
	defer h.Close()
	nl, err := handleAt(ns)
	must(b, err)
	links, err := nl.LinkList()
	nl.Close()
	must(b, err)
	c := &moveCounter{known: map[int32]bool{}, done: make(chan struct{}), ended: make(chan struct{})}
	for _, l := range links {
		c.known[int32(l.Attrs().Index)] = true
	}
	ch := make(chan netlink.LinkUpdate, 4096)
	must(b, netlink.LinkSubscribeWithOptions(ch, c.done, netlink.LinkSubscribeOptions{Namespace: &h, ReceiveBufferSize: 1 << 22,
		ErrorCallback: func(err error) {
			select {
			case <-c.done: // Close ends the receive with an error
			default:
				b.Logf("link events of %s: %v", ns, err)
			}
		}}))
	go func() {
		defer close(c.ended)
		for u := range ch {
			c.mu.Lock()
			switch {
			case u.Header.Type == unix.RTM_DELLINK && c.known[u.Index]:
				delete(c.known, u.Index)
				c.out++
			case u.Header.Type == unix.RTM_NEWLINK && !c.known[u.Index]:
				c.known[u.Index] = true
				c.in++
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// stop ends the counting and returns the moves seen: out of the netns
// and back in.
func (c *moveCounter) stop() int {
	time.Sleep(200 * time.Millisecond) // let the last events arrive
	close(c.done)
	<-c.ended
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.in + c.out
}
