package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// The chaos run: chaosWorkers pods at once, each worker running pod
// lifecycles back to back over chaosDevices host veths, until
// CHAOS_LIFECYCLES lifecycles (chaosCILifecycles by default) are done.
const (
	chaosCILifecycles = 24
	// chaosCRIOLifecycles is TestE2E_CRIOChaos's count: about one round of
	// kills (chaosRound) at the rate the kills come.
	chaosCRIOLifecycles = 16
	chaosWorkers        = 4
	chaosDevices        = 6
	// chaosPodTimeout bounds one pod's way to Running: a pod whose start
	// a kill hit may wait for the kubelet's retries.
	chaosPodTimeout = 3 * time.Minute
	// chaosSettle bounds how long netdra's programs may stay on a device
	// without an allocation: Free takes them off in the background, and
	// a provisioner killed before that sweeps them once dra configures it
	// again after its restart.
	chaosSettle = time.Minute
)

// The victims, and how often each comes up in a round of kills: nri,
// whose death is the one that used to let containers start without
// their devices, twice.
var chaosRound = []string{"nri", "nri", "state", "provisioner", "dra", "containerd", "kubelet"}

var chaosMoments = []string{"start", "stop", "any"}

// chaosList reads a comma-separated list from the environment (to aim
// the kills, e.g. CHAOS_VICTIMS=state,provisioner,dra CHAOS_MOMENTS=start).
func chaosList(name string, def []string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Split(v, ",")
	}
	return def
}

// chaosKill is one kill -9 and its restart.
type chaosKill struct {
	victim, moment string
	at, back       time.Time
}

// chaosStart is one pod's way from creation to Running.
type chaosStart struct {
	name             string
	created, running time.Time
	refused          bool // a container creation was refused first
}

// chaos is one chaos run over a churn's node: the lifecycles, the kills,
// and what was measured.
type chaos struct {
	*churn
	rng        *rand.Rand // the kill loop's alone
	victims    []string   // one round of kills
	moments    []string   // when to kill: "start", "stop", "any"
	lifecycles int
	startEv    chan struct{} // a pod was just created
	stopEv     chan struct{} // a pod is just being deleted
	cmu        sync.Mutex
	kills      []chaosKill
	starts     []chaosStart

	// until, when set, runs lifecycles until then instead of lifecycles
	// of them (which run sets to the number started).
	until time.Time
	// finished counts the lifecycles that ended, pod deleted.
	finished atomic.Int64
	// quiesce is read-held by each lifecycle in flight (with the
	// programs' check after it); a sampler write-holds it to see the
	// node with no lifecycle in flight.
	quiesce sync.RWMutex
	// churned, when set, is called once the last lifecycle ended, before
	// the node is left to converge.
	churned func()
}

// chaosEnv reads an integer setting from the environment.
func chaosEnv(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestE2E_Chaos: pod lifecycles, chaosWorkers at once, while nri, state,
// the provisioner, dra, containerd and the kubelet are killed with
// SIGKILL at random moments (right after a pod's creation, so during its
// prepare, RunPodSandbox or CreateContainer; right after a deletion, so
// during its StopPodSandbox or unprepare; or any time) and restarted
// after a short delay, as their containers (or systemd) would. Every
// container that ran saw its device from its first moment (its own dump);
// no device is ever allocated twice or held by a pod without its claim;
// afterwards no claim, no allocation row, every device back in the host
// netns under its name (or reported lost), every process healthy.
// CHAOS_LIFECYCLES sets the count, CHAOS_SEED the seed (logged),
// CHAOS_RUNTIME the node's runtime: containerd (the default) or crio.
//
// On CRI-O (1.34) the same run checks the same things, with three
// differences in what happens: a killed runtime is crio, whose containers
// keep running under their conmon (not a shim) while it is away, and which
// finds them again at its start; a pod's required-plugins annotation is
// not read (no NRI validator), so a container whose start meets a killed
// nri is refused only by netdra's CDI hook (its netns lacks net1) and
// started by the kubelet's next try, never by a validator's refusal;
// crio's NRI drops nri's connection when nri dies, as containerd's does,
// and takes the restarted nri's new one.
func TestE2E_Chaos(t *testing.T) {
	seed := uint64(chaosEnv(t, "CHAOS_SEED", time.Now().UnixNano()))
	n := int(chaosEnv(t, "CHAOS_LIFECYCLES", chaosCILifecycles))
	rt := realnode.Runtime(cmp.Or(os.Getenv("CHAOS_RUNTIME"), string(realnode.Containerd)))
	if rt != realnode.Containerd && rt != realnode.CRIO {
		t.Fatalf("CHAOS_RUNTIME=%q: want %q or %q", rt, realnode.Containerd, realnode.CRIO)
	}
	runChaos(t, rt, n, seed)
}

// TestE2E_CRIOChaos is TestE2E_Chaos on a CRI-O node, shorter:
// chaosCRIOLifecycles lifecycles, whatever CHAOS_LIFECYCLES says, crio
// killed instead of containerd (CHAOS_SEED as there). TestE2E_Chaos's
// doc says where CRI-O behaves differently.
func TestE2E_CRIOChaos(t *testing.T) {
	runChaos(t, realnode.CRIO, chaosCRIOLifecycles, uint64(chaosEnv(t, "CHAOS_SEED", time.Now().UnixNano())))
}

// runChaos is a chaos run of n lifecycles on a node whose runtime is rt;
// the runtime's kills are of containerd or crio, whichever rt is (a
// "containerd" victim of CHAOS_VICTIMS names the node's runtime).
func runChaos(t *testing.T, rt realnode.Runtime, n int, seed uint64) {
	t.Logf("chaos: %d lifecycles, %d at once, %d devices, runtime %s, seed %d (CHAOS_SEED=%d to replay the choices)",
		n, chaosWorkers, chaosDevices, rt, seed, seed)
	ch := startChurnOpts(t, chaosDevices, netdraOpts{nodeOpts: []worldtest.NodeOption{worldtest.WithRuntime(rt)}})
	ch.runtimeRestarts = true
	victims := slices.Clone(chaosList("CHAOS_VICTIMS", chaosRound))
	for i, v := range victims {
		if v == "containerd" || v == "crio" {
			victims[i] = string(rt)
		}
	}
	cs := &chaos{churn: ch, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), lifecycles: n,
		startEv: make(chan struct{}, 1), stopEv: make(chan struct{}, 1),
		victims: victims, moments: chaosList("CHAOS_MOMENTS", chaosMoments)}
	t.Logf("chaos: victims %v, moments %v", cs.victims, cs.moments)
	cs.run()
}

// run runs the lifecycles and the kills, then waits for the node to
// converge and checks what is left.
func (cs *chaos) run() {
	t := cs.t
	budget := time.Duration(cs.lifecycles)*20*time.Second + 5*time.Minute
	if !cs.until.IsZero() {
		budget = time.Until(cs.until) + 10*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	monCtx, stopMonitor := context.WithCancel(ctx)
	var monitor sync.WaitGroup
	monitor.Go(func() { cs.monitor(monCtx) })
	t0 := time.Now()
	var done sync.WaitGroup
	next := make(chan int)
	for range chaosWorkers {
		done.Go(func() {
			for i := range next {
				cs.quiesce.RLock()
				if err := cs.lifecycle(ctx, fmt.Sprintf("chaos-%03d", i)); err != nil {
					t.Error(err)
				}
				if err := cs.checkPrograms(ctx); err != nil {
					t.Errorf("after lifecycle %d: %v", i, err)
				}
				cs.finished.Add(1)
				cs.quiesce.RUnlock()
			}
		})
	}
	killing := make(chan struct{})
	go func() {
		i := 0
		for ; cs.until.IsZero() && i < cs.lifecycles || !cs.until.IsZero() && time.Now().Before(cs.until); i++ {
			next <- i
		}
		cs.lifecycles = i
		close(next)
		close(killing) // the last lifecycles run out undisturbed
	}()
	cs.killLoop(ctx, killing)
	done.Wait()
	churned := time.Since(t0)
	if cs.churned != nil {
		cs.churned()
	}
	last := time.Now()
	if k := cs.lastKill(); k != nil {
		last = k.at
	}
	cs.converge(ctx)
	converged := time.Since(last)
	stopMonitor()
	monitor.Wait()
	cs.report(churned, converged)
	cs.checkLeft()
	cs.keepLogs()
}

// keepLogs copies the processes' logs to CHAOS_LOGDIR when it is set, for
// a look at where the time went.
func (cs *chaos) keepLogs() {
	dir := os.Getenv("CHAOS_LOGDIR")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		cs.t.Error(err)
		return
	}
	for _, p := range []*nodetest.Proc{cs.nn.state, cs.nn.prov, cs.nn.dra, cs.nn.nriP} {
		_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), []byte(p.Log()), 0o644)
	}
	for _, c := range []string{"kubelet", string(cs.nn.node.Runtime())} {
		if b, err := os.ReadFile(cs.nn.node.LogPath(c)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, c+".log"), b, 0o644)
		}
	}
	cs.cmu.Lock()
	defer cs.cmu.Unlock()
	var b strings.Builder
	for _, s := range cs.starts {
		fmt.Fprintf(&b, "%s created %s running %s took %s refused %v\n", s.name, s.created.UTC().Format(time.StampMilli),
			s.running.UTC().Format(time.StampMilli), s.running.Sub(s.created).Round(time.Millisecond), s.refused)
	}
	for _, k := range cs.kills {
		fmt.Fprintf(&b, "kill %s (%s) at %s back %s\n", k.victim, k.moment, k.at.UTC().Format(time.StampMilli), k.back.UTC().Format(time.StampMilli))
	}
	_ = os.WriteFile(filepath.Join(dir, "chaos.txt"), []byte(b.String()), 0o644)
}

// killLoop kills and restarts one process at a time, in rounds of
// chaosRound in a random order, until stop is closed.
func (cs *chaos) killLoop(ctx context.Context, stop <-chan struct{}) {
	if len(cs.victims) == 0 {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		return
	}
	var round []string
	for {
		gap := time.Duration(500+cs.rng.IntN(2500)) * time.Millisecond
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if len(round) == 0 {
			round = slices.Clone(cs.victims)
			cs.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		victim := round[0]
		round = round[1:]
		moment := cs.moments[cs.rng.IntN(len(cs.moments))]
		cs.waitMoment(ctx, moment, stop)
		cs.kill(ctx, victim, moment)
	}
}

// waitMoment waits for the next pod creation ("start") or deletion
// ("stop"), at most 5 s, then a random 0-700 ms more: within a pod's way
// to Running, so that the kill lands in its prepare,
// RunPodSandbox, CreateContainer or the container's start (or in its
// StopPodSandbox and unprepare).
func (cs *chaos) waitMoment(ctx context.Context, moment string, stop <-chan struct{}) {
	ev := map[string]chan struct{}{"start": cs.startEv, "stop": cs.stopEv}[moment]
	if ev != nil {
		select {
		case <-ev: // an old one
		default:
		}
		select {
		case <-ev:
		case <-stop:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	time.Sleep(time.Duration(cs.rng.IntN(700)) * time.Millisecond)
}

// kill kills victim with SIGKILL and, after 300-1500 ms, starts it again.
func (cs *chaos) kill(ctx context.Context, victim, moment string) {
	t := cs.t
	delay := time.Duration(300+cs.rng.IntN(1200)) * time.Millisecond
	k := chaosKill{victim: victim, moment: moment, at: time.Now()}
	switch victim {
	case "kubelet", "containerd", "crio":
		cs.nn.node.Kill(victim)
	default:
		cs.proc(victim).Kill()
	}
	time.Sleep(delay)
	var err error
	switch victim {
	case "kubelet":
		err = cs.nn.node.RestartKubelet(ctx)
	case "containerd", "crio":
		err = cs.nn.node.RestartRuntime(ctx)
	default:
		cs.proc(victim).Restart()
	}
	if err != nil {
		t.Errorf("restarting %s: %v", victim, err)
	}
	k.back = time.Now()
	t.Logf("kill -9 %s (%s) at +%s, back after %s", victim, moment, k.at.Sub(cs.t0()).Round(time.Millisecond), k.back.Sub(k.at).Round(time.Millisecond))
	cs.cmu.Lock()
	cs.kills = append(cs.kills, k)
	cs.cmu.Unlock()
}

// proc is the netdra process of that name.
func (cs *chaos) proc(name string) *nodetest.Proc {
	return map[string]*nodetest.Proc{"nri": cs.nn.nriP, "state": cs.nn.state, "provisioner": cs.nn.prov, "dra": cs.nn.dra}[name]
}

// t0 is the first pod's creation.
func (cs *chaos) t0() time.Time {
	cs.cmu.Lock()
	defer cs.cmu.Unlock()
	if len(cs.starts) == 0 {
		return time.Now()
	}
	return cs.starts[0].created
}

func (cs *chaos) lastKill() *chaosKill {
	cs.cmu.Lock()
	defer cs.cmu.Unlock()
	if len(cs.kills) == 0 {
		return nil
	}
	return &cs.kills[len(cs.kills)-1]
}

// signal tells the kill loop, without waiting, that a moment came.
func signal(ev chan struct{}) {
	select {
	case ev <- struct{}{}:
	default:
	}
}

// lifecycle creates a pod, waits until it runs (chaosPodTimeout), checks
// from inside its container and in its netns that it has its device, and
// deletes it again.
func (cs *chaos) lifecycle(ctx context.Context, name string) error {
	pod, err := cs.createPod(ctx, name)
	if err != nil {
		return err
	}
	st := chaosStart{name: name, created: time.Now()}
	signal(cs.startEv)
	defer func() {
		signal(cs.stopEv)
		if err := cs.deletePod(ctx, pod); err != nil {
			cs.t.Error(err)
		}
	}()
	cur, err := cs.waitRunning(ctx, pod)
	if err != nil {
		return err
	}
	st.running = time.Now()
	st.refused = cs.refused(ctx, cur)
	cs.cmu.Lock()
	cs.starts = append(cs.starts, st)
	cs.cmu.Unlock()
	dev, err := cs.checkPod(ctx, cur)
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	cs.mu.Lock()
	cs.ran[name] = dev
	cs.uses[dev]++
	cs.mu.Unlock()
	time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // the pod's work
	return nil
}

// waitRunning polls the pod until a container of it runs.
func (cs *chaos) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var cur *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, chaosPodTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.c.CoreV1().Pods(cs.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the apiserver may be busy
		}
		cur = p
		return containerRuns(p), nil // the phase says Running once a container was created
	})
	if err != nil {
		phase := corev1.PodPhase("unknown")
		if cur != nil {
			phase = cur.Status.Phase
		}
		return nil, fmt.Errorf("pod %s never ran (phase %s): %w", pod.Name, phase, err)
	}
	return cur, nil
}

// refused reports whether the pod's container creation was refused before
// it ran: by the netns hook or containerd's default validator (CRI-O has
// none).
func (cs *chaos) refused(ctx context.Context, pod *corev1.Pod) bool {
	evs, err := cs.c.CoreV1().Events(cs.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && (strings.Contains(e.Message, "not in the network namespace") ||
			strings.Contains(e.Message, `required plugin "netdra" not present`)) {
			return true
		}
	}
	return false
}

// checkPod checks a running pod: its claim's device is in its netns as
// net1 with the claim's MTU, and every attempt of its container that got
// to run saw net1 with the device's MAC and MTU from its first moment.
func (cs *chaos) checkPod(ctx context.Context, pod *corev1.Pod) (string, error) {
	var dev string
	if err := retryAPI(ctx, func(ctx context.Context) (err error) {
		dev, err = cs.claimDevice(ctx, pod)
		return err
	}); err != nil {
		return "", err
	}
	// The netns now, and then what the container saw at its start (both
	// checked: a device lost later is told from one never there).
	inNetns := cs.stillHas(pod.UID, dev)
	if netns, ok := cs.nn.node.Sandbox(pod.UID); ok {
		cs.mu.Lock()
		cs.netns[netns] = true
		cs.mu.Unlock()
	}
	views, err := cs.views(ctx, pod)
	if err != nil {
		return "", err
	}
	want := fmt.Sprintf("mtu %d hw %s", churnMTU, cs.orig[dev].Address)
	for file, view := range views {
		ok := false
		for _, line := range strings.Split(view, "\n") {
			ok = ok || strings.Contains(line, ": "+churnIfName+": <up") && strings.Contains(line, want)
		}
		if !ok {
			cs.violation("pod %s: a container (%s) started without %s (device %s): it saw\n%s", pod.Name, file, churnIfName, dev, view)
		}
	}
	return dev, inNetns
}

// views returns the first dump of every attempt of the pod's app
// container that got to run, by log file, once there is at least one.
func (cs *chaos) views(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	dir := filepath.Dir(realnode.ContainerLogPath(cs.nn.node.Dir(), pod.Namespace, pod.Name, pod.UID, "app", 0))
	views := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			if log, err := realnode.ReadContainerLog(l); err == nil {
				if i := strings.Index(log, "testapp end 1\n"); i >= 0 {
					views[filepath.Base(l)] = log[:i]
				}
			}
		}
		return len(views) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no dump from its container in %s: %w", dir, err)
	}
	return views, nil
}

// converge waits until the node is back to rest after the churn: no
// claim, no allocation row, every device in the host netns or reported
// lost, every process serving and dra registered with the kubelet.
func (cs *chaos) converge(ctx context.Context) {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return cs.atRest(ctx) == nil, nil
	})
	if err != nil {
		cs.t.Errorf("the node did not come to rest: %v (last: %v)", err, cs.atRest(ctx))
	}
}

// atRest says what keeps the node from being at rest, or nil.
func (cs *chaos) atRest(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	claims, err := cs.c.ResourceV1().ResourceClaims(cs.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) > 0 {
		return fmt.Errorf("claims left: %d (%v)", len(claims.Items), err)
	}
	resp, err := cs.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil || len(resp.GetAllocations()) > 0 {
		return fmt.Errorf("allocation rows left: %v (%v)", resp.GetAllocations(), err)
	}
	for _, p := range []*nodetest.Proc{cs.nn.state, cs.nn.prov, cs.nn.dra, cs.nn.nriP} {
		if err := rpc.CheckHealth(ctx, p.Socket, ""); err != nil {
			return fmt.Errorf("%s not serving: %w", p.Name, err)
		}
	}
	node, err := cs.c.CoreV1().Nodes().Get(ctx, cs.nn.node.Name(), metav1.GetOptions{})
	if err != nil || !nodeReady(node) {
		return fmt.Errorf("node not Ready (%v)", err)
	}
	missing, err := cs.missingDevices()
	if err != nil {
		return err
	}
	for _, dev := range missing {
		if !cs.reportedLost(dev) {
			return fmt.Errorf("device %s neither in the host netns nor reported lost", dev)
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// missingDevices lists the devices whose MAC is not in the host netns.
func (cs *chaos) missingDevices() ([]string, error) {
	links, err := netnsLinks(cs.nn.hostNS)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, dev := range cs.devices {
		if !slices.ContainsFunc(links, func(l hostLink) bool { return l.Address == cs.orig[dev].Address }) {
			missing = append(missing, dev)
		}
	}
	return missing, nil
}

// reportedLost reports whether the provisioner or nri logged the device
// as lost.
func (cs *chaos) reportedLost(dev string) bool {
	for _, p := range []*nodetest.Proc{cs.nn.prov, cs.nn.nriP} {
		for _, line := range strings.Split(p.Log(), "\n") {
			if strings.Contains(line, "Device lost") && strings.Contains(line, `"device":"`+dev+`"`) {
				return true
			}
		}
	}
	return false
}

// checkPrograms waits, at most chaosSettle, until none of netdra's eBPF
// programs is on an interface of the host netns other than a device with
// an allocation, and says what stayed. The programs are read before the
// allocations: a device's programs go on after its allocation row is
// written and come off after its Free; a read in between (a Free whose
// programs are still coming off, a provisioner restarting) is read again.
func (cs *chaos) checkPrograms(ctx context.Context) error {
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, chaosSettle, true, func(ctx context.Context) (bool, error) {
		on, err := ebpftest.Attached(cs.nn.hostNS, ebpftest.Netdra)
		if err != nil {
			last = []string{err.Error()}
			return false, nil
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cs.nn.stateClient.ListAllocations(actx, &statev1.ListAllocationsRequest{})
		if err != nil {
			last = []string{"listing the allocations: " + err.Error()}
			return false, nil // the state service may be down
		}
		allocated := map[string]bool{}
		for _, a := range resp.GetAllocations() {
			allocated[a.GetDeviceName()] = true
		}
		last = slices.DeleteFunc(on, func(p string) bool {
			ifName, _, _ := strings.Cut(p, " ")
			return allocated[ifName]
		})
		return len(last) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("netdra's eBPF programs on interfaces without an allocation after %s: %v", chaosSettle, last)
	}
	return nil
}

// checkLeft checks the end state: every device that is in the host netns
// is there under its own name, MTU and up state, and none of netdra's
// programs is on any interface there; no pod netns is left; no invariant
// broke along the way.
func (cs *chaos) checkLeft() {
	t := cs.t
	if err := cs.checkPrograms(context.Background()); err != nil {
		t.Error(err)
	}
	links, err := netnsLinks(cs.nn.hostNS)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		dev, ok := cs.byMAC[l.Address]
		if want := cs.orig[dev]; ok && (l.IfName != want.IfName || l.MTU != want.MTU || l.up() != want.up()) {
			t.Errorf("device %s is back as %+v, want %+v", dev, l, want)
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for ns := range cs.netns {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			t.Errorf("pod netns left: %s", ns)
		}
	}
	for _, v := range cs.violations {
		t.Error(v)
	}
	if len(cs.ran) != cs.lifecycles {
		t.Errorf("%d of %d lifecycles ran with their device", len(cs.ran), cs.lifecycles)
	}
}

// report logs the figures: lifecycles, kills per process and moment,
// containers refused then started, time to Running (for the pods whose
// start a kill overlapped, by process, and for the others), and the time
// to converge after the last kill.
func (cs *chaos) report(churned, converged time.Duration) {
	cs.cmu.Lock()
	defer cs.cmu.Unlock()
	kills := map[string]int{}
	for _, k := range cs.kills {
		kills[k.victim+"/"+k.moment]++
	}
	refused := 0
	hit := map[string][]time.Duration{} // victim -> start times of pods it overlapped
	for _, s := range cs.starts {
		if s.refused {
			refused++
		}
		d := s.running.Sub(s.created)
		var victims []string
		for _, k := range cs.kills {
			if k.at.Before(s.running) && k.back.After(s.created) && !slices.Contains(victims, k.victim) {
				victims = append(victims, k.victim)
			}
		}
		slices.Sort(victims)
		by := cmp.Or(strings.Join(victims, "+"), "none")
		hit[by] = append(hit[by], d)
	}
	cs.t.Logf("CHAOS: %d lifecycles in %s, %d kills %v; %d containers refused then started; %d devices lost (reported); converged %s after the last kill",
		len(cs.starts), churned.Round(time.Millisecond), len(cs.kills), kills, refused, len(cs.lostNow()), converged.Round(time.Millisecond))
	for _, by := range slices.Sorted(maps.Keys(hit)) {
		ds := hit[by]
		slices.Sort(ds)
		cs.t.Logf("CHAOS: time to Running, start overlapped by a kill of %-16s: %3d pods, median %s, max %s",
			by, len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
}

// lostNow lists the devices not in the host netns now.
func (cs *chaos) lostNow() []string {
	m, _ := cs.missingDevices()
	return m
}
