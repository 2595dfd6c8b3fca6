package realnode

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// Config describes one node.
type Config struct {
	// Name is the Node's name (the kubelet's --hostname-override).
	Name string
	// Dir holds everything of the node: keep it short (unix socket paths
	// are 108 bytes at most). It is created; Stop removes it.
	Dir string
	// Kubeconfig is the kubelet's (an admin kubeconfig of the control
	// plane), Client an admin client of the same control plane.
	Kubeconfig string
	Client     kubernetes.Interface
	// Binaries are what Build returned.
	Binaries *Binaries
	// Labels are the Node's extra labels (--node-labels).
	Labels map[string]string
	// Runtime is the node's container runtime. Default: Containerd. CRIO
	// needs Binaries that BuildCRIO completed.
	Runtime Runtime
	// Logger receives progress lines. Default: discard.
	Logger *slog.Logger
}

// Node is one running real node. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	index   int    // the node's number in this process: its bridge and subnet
	nodeIP  string // the host's address the kubelet reports
	ports   [2]int // kubelet, healthz
	sysctls map[string]string

	mu      sync.Mutex
	netns   map[string]bool // of the sandboxes seen, for Stop
	runtime *proc           // containerd or crio
	kubelet *proc
	stopped bool
}

var (
	nodesMu sync.Mutex
	running int // this process's nodes; the host is entered at the first
)

// Start starts containerd, imports the images, starts the kubelet and waits
// until the Node is Ready, then lifts the not-ready taint (the test world
// runs no node-lifecycle controller). On failure it removes what it made.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Name == "" || cfg.Dir == "" || cfg.Kubeconfig == "" || cfg.Client == nil || cfg.Binaries == nil {
		return nil, errors.New("realnode: Name, Dir, Kubeconfig, Client and Binaries are required")
	}
	if len(cfg.Dir) > 60 {
		return nil, fmt.Errorf("realnode: Dir %q is too long for its unix sockets", cfg.Dir)
	}
	switch cfg.Runtime {
	case "":
		cfg.Runtime = Containerd
	case Containerd:
	case CRIO:
		if cfg.Binaries.Crio == "" {
			return nil, errors.New("realnode: Runtime crio needs Binaries from BuildCRIO")
		}
	default:
		return nil, fmt.Errorf("realnode: Runtime %q is neither %q nor %q", cfg.Runtime, Containerd, CRIO)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), netns: map[string]bool{}}
	n.index = indexOf(cfg.Name)
	nodesMu.Lock()
	if running == 0 {
		if err := enterHost(); err != nil {
			nodesMu.Unlock()
			return nil, err
		}
	}
	running++
	nodesMu.Unlock()
	if err := n.start(ctx); err != nil {
		if serr := n.Stop(); serr != nil {
			n.log.Warn("cleaning up after a failed start", "err", serr)
		}
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	t0 := time.Now()
	var err error
	if n.nodeIP, err = hostIP(); err != nil {
		return err
	}
	for i := range n.ports {
		if n.ports[i], err = testenv.PortOn(n.nodeIP, "127.0.0.1"); err != nil {
			return err
		}
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}
	if n.cfg.Runtime == CRIO {
		if err := n.loadImages(ctx); err != nil {
			return err
		}
	}
	if err := n.startRuntime(ctx); err != nil {
		return err
	}
	if n.cfg.Runtime == Containerd {
		if err := n.importImages(ctx); err != nil {
			return err
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	n.log.Info("real node ready", "took", time.Since(t0).Round(time.Millisecond), "dir", n.cfg.Dir)
	return nil
}

func (n *Node) writeConfigs() error {
	d := n.cfg.Dir
	for _, sub := range []string{"nri/plugins", "nri/conf.d", "cdi", "podlogs", "kubelet", "logs"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return err
		}
	}
	ca, err := clusterCA(n.cfg.Kubeconfig, filepath.Join(d, "kubelet-client-ca.crt"))
	if err != nil {
		return err
	}
	b := n.cfg.Binaries
	vars := map[string]string{"dir": d, "pause": PauseImage, "runc": b.Runc, "cni": b.CNIDir, "crisock": n.CRISocket(),
		"nodeip": n.nodeIP, "clientca": ca,
		"port": strconv.Itoa(n.ports[0]), "healthz": strconv.Itoa(n.ports[1]),
		"bridge": n.Bridge(), "subnet": fmt.Sprintf("10.%d.%d.0/24", 200+n.index/250, n.index%250)} // 10.200-203.x
	if n.cfg.Runtime == CRIO {
		vars["pinns"], vars["runcclamp"], vars["conmon"] = b.Pinns(), b.RuncClamp(), b.Conmon
		for _, sub := range []string{"crio/hooks.d", "crio/keys"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
				return err
			}
		}
		if err := render(filepath.Join(d, "crio/crio.conf"), crioConfig, vars); err != nil {
			return err
		}
		if err := writeNRIDropIn(filepath.Join(d, "crio/crio.conf.d")); err != nil {
			return err
		}
		if err := render(filepath.Join(d, "crio/policy.json"), crioPolicy, vars); err != nil {
			return err
		}
	} else if err := render(filepath.Join(d, "containerd.toml"), containerdConfig, vars); err != nil {
		return err
	}
	if err := render(filepath.Join(d, "kubelet.yaml"), kubeletConfig, vars); err != nil {
		return err
	}
	return render(filepath.Join(d, "cni/net.d/10-realnode.conflist"), cniConfig, vars)
}

// indexOf numbers a node by its name, for its bridge and pod subnet: nodes
// of other test processes run beside this one's, so no counter would do.
func indexOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % 1000)
}

// Bridge is the name of the node's CNI bridge.
func (n *Node) Bridge() string { return fmt.Sprintf("rnbr%d", n.index) }

// Name is the Node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Dir is the node's directory.
func (n *Node) Dir() string { return n.cfg.Dir }

// Runtime is the node's container runtime.
func (n *Node) Runtime() Runtime { return n.cfg.Runtime }

// CRISocket is the runtime's CRI socket, the kubelet's
// containerRuntimeEndpoint: containerd's gRPC socket or CRI-O's.
func (n *Node) CRISocket() string {
	if n.cfg.Runtime == CRIO {
		return filepath.Join(n.cfg.Dir, "crio.sock")
	}
	return n.ContainerdSocket()
}

// NRISocket is the runtime's NRI socket, where netdra's nri plugin
// connects. It is in NRIDir, as /var/run/nri/nri.sock is in /var/run/nri.
func (n *Node) NRISocket() string { return filepath.Join(n.NRIDir(), "nri.sock") }

// NRIDir is the directory of containerd's NRI socket (the node's
// /var/run/nri: a DaemonSet mounts the directory, not the socket).
func (n *Node) NRIDir() string { return filepath.Join(n.cfg.Dir, "nri") }

// ContainerdSocket is containerd's gRPC (and CRI) socket.
func (n *Node) ContainerdSocket() string { return filepath.Join(n.cfg.Dir, "containerd.sock") }

// KubeletDir is the kubelet's --root-dir.
func (n *Node) KubeletDir() string { return filepath.Join(n.cfg.Dir, "kubelet") }

// RegistryDir is where DRA drivers put their registration sockets.
func (n *Node) RegistryDir() string { return filepath.Join(n.KubeletDir(), "plugins_registry") }

// PluginsDir is the kubelet's plugins directory (a DRA driver's own dir
// goes under it).
func (n *Node) PluginsDir() string { return filepath.Join(n.KubeletDir(), "plugins") }

// CDIDir is where containerd reads CDI specs.
func (n *Node) CDIDir() string { return filepath.Join(n.cfg.Dir, "cdi") }

// LogPath is the log file of the node's kubelet, containerd or crio.
func (n *Node) LogPath(component string) string {
	return filepath.Join(n.cfg.Dir, "logs", component+".log")
}

// startRuntime starts the node's runtime and waits until its CRI answers.
func (n *Node) startRuntime(ctx context.Context) error {
	if n.cfg.Runtime == CRIO {
		return n.startCRIO(ctx)
	}
	return n.startContainerd(ctx)
}

func (n *Node) startContainerd(ctx context.Context) error {
	p, err := startProc(n.LogPath("containerd"), n.cfg.Binaries.Containerd(), "--config", filepath.Join(n.cfg.Dir, "containerd.toml"))
	if err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	return n.awaitRuntime(ctx, "containerd", p, func(ctx context.Context) bool {
		return exec.CommandContext(ctx, n.cfg.Binaries.Ctr(), "--address", n.ContainerdSocket(), "version").Run() == nil
	})
}

// awaitRuntime makes p the node's runtime and waits up to a minute until
// ready reports it answers; its error names the runtime, with the tail of
// its log when it exited first.
func (n *Node) awaitRuntime(ctx context.Context, name string, p *proc, ready func(context.Context) bool) error {
	n.mu.Lock()
	n.runtime = p
	n.mu.Unlock()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("%s exited: %s", name, tail(n.LogPath(name)))
		default:
		}
		return ready(ctx), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", name, err)
	}
	return nil
}

func (n *Node) importImages(ctx context.Context) error {
	for _, img := range []string{"pause.tar", "testapp.tar"} {
		out, err := exec.CommandContext(ctx, n.cfg.Binaries.Ctr(), "--address", n.ContainerdSocket(), "-n", "k8s.io",
			"images", "import", "--local", filepath.Join(n.cfg.Binaries.Images, img)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("importing %s: %w: %s", img, err, out)
		}
	}
	return nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	args := []string{
		"--config=" + filepath.Join(n.cfg.Dir, "kubelet.yaml"),
		"--kubeconfig=" + n.cfg.Kubeconfig,
		"--root-dir=" + n.KubeletDir(),
		"--cert-dir=" + filepath.Join(n.KubeletDir(), "pki"),
		"--hostname-override=" + n.cfg.Name,
		"--node-ip=" + n.nodeIP,
		"--v=2",
	}
	if len(n.cfg.Labels) > 0 {
		var l []string
		for k, v := range n.cfg.Labels {
			l = append(l, k+"="+v)
		}
		args = append(args, "--node-labels="+strings.Join(l, ","))
	}
	p, err := startProc(n.LogPath("kubelet"), n.cfg.Binaries.Kubelet(), args...)
	if err != nil {
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	return nil
}

// waitReady waits for the Node to be Ready and removes its not-ready taint.
func (n *Node) waitReady(ctx context.Context) error {
	c := n.cfg.Client
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n.mu.Lock()
		k := n.kubelet
		n.mu.Unlock()
		select {
		case <-k.exited:
			return false, fmt.Errorf("the kubelet exited: %s", tail(n.LogPath("kubelet")))
		default:
		}
		node, err := c.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s Ready: %w (kubelet log %s)", n.cfg.Name, err, n.LogPath("kubelet"))
	}
	return n.untaint(ctx)
}

// untaint removes the node.kubernetes.io/not-ready taint, which no
// node-lifecycle controller lifts in the test world.
func (n *Node) untaint(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var keep []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				keep = append(keep, t)
			}
		}
		if len(keep) == len(node.Spec.Taints) {
			return true, nil
		}
		node.Spec.Taints = keep
		_, err = n.cfg.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

// RestartKubelet stops the kubelet (SIGTERM, as systemd would) and starts
// it again, leaving the pods running; it returns once the Node is Ready.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.mu.Lock()
	k := n.kubelet
	n.mu.Unlock()
	k.stop(30 * time.Second)
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// RestartContainerd stops the node's runtime (SIGTERM) and starts it
// again; the containers keep running in their shims (containerd) or under
// their conmon (CRI-O). On a CRI-O node it restarts CRI-O.
func (n *Node) RestartContainerd(ctx context.Context) error { return n.RestartRuntime(ctx) }

// RestartRuntime stops the node's runtime (SIGTERM) and starts it again,
// returning once its CRI answers.
func (n *Node) RestartRuntime(ctx context.Context) error {
	n.mu.Lock()
	c := n.runtime
	n.mu.Unlock()
	c.stop(30 * time.Second)
	return n.startRuntime(ctx)
}

// ContainerLog returns what a container of a pod on this node wrote, in
// order, without the CRI log format's prefixes ("" when it wrote nothing
// yet). restart is the container's restart count (0 for its first run).
func (n *Node) ContainerLog(namespace, pod string, uid types.UID, container string, restart int) (string, error) {
	log, err := ReadContainerLog(ContainerLogPath(n.cfg.Dir, namespace, pod, uid, container, restart))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return log, err
}

// ContainerLogPath is where the kubelet of the node in nodeDir keeps a
// container's log (its podLogsDir is <nodeDir>/podlogs).
func ContainerLogPath(nodeDir, namespace, pod string, uid types.UID, container string, restart int) string {
	return filepath.Join(nodeDir, "podlogs", fmt.Sprintf("%s_%s_%s", namespace, pod, uid), container, fmt.Sprintf("%d.log", restart))
}

// ReadContainerLog returns what a container wrote, without the CRI log
// format's prefix of each line ("<time> <stream> <P|F> "; P is part of a
// line that goes on in the next).
func ReadContainerLog(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			continue
		}
		out.WriteString(f[3])
		if f[2] == "F" {
			out.WriteByte('\n')
		}
	}
	return out.String(), nil
}

// Stop deletes the node's pods (the kubelet stops their sandboxes: netdra's
// nri detaches, dra unprepares), stops the kubelet and containerd, and
// removes everything the node made. It is idempotent.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	n.mu.Unlock()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.drain(ctx); err != nil {
		errs = append(errs, err)
	}
	n.mu.Lock()
	k, c := n.kubelet, n.runtime
	n.mu.Unlock()
	if k != nil {
		k.stop(30 * time.Second)
	}
	if c != nil {
		n.recordSandboxes(ctx)
		if n.cfg.Runtime == CRIO {
			n.removeSandboxes(ctx)
		} else {
			n.removeContainers(ctx)
		}
		c.stop(30 * time.Second)
		if left := killStragglers(n.cfg.Dir); len(left) > 0 {
			n.log.Warn("killed what the runtime left running", "processes", left)
		}
	}
	errs = append(errs, n.cleanHost()...)
	nodesMu.Lock()
	running--
	if running == 0 {
		errs = append(errs, leaveHost()...)
	}
	nodesMu.Unlock()
	if err := os.RemoveAll(n.cfg.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Drain deletes the node's pods through the API and waits (a minute at
// most) until the kubelet has torn each down and they are gone. Tests call
// it while netdra still runs, so that every device goes back through the
// real teardown path before the processes stop.
func (n *Node) Drain(ctx context.Context) {
	c := n.cfg.Client
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.cfg.Name}
	if pods, err := c.CoreV1().Pods("").List(ctx, sel); err == nil {
		for _, p := range pods.Items {
			_ = c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("").List(ctx, sel)
		return err == nil && len(pods.Items) == 0, nil
	})
}

// drain deletes the node's pods through the API and waits until they are
// gone (the kubelet tore each down), then deletes the Node object.
func (n *Node) drain(ctx context.Context) error {
	c := n.cfg.Client
	n.mu.Lock()
	alive := n.kubelet != nil && !n.kubelet.done()
	n.mu.Unlock()
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.cfg.Name}
	if alive {
		n.Drain(ctx)
	}
	// Whatever is left (no kubelet to stop it) goes without grace.
	if pods, err := c.CoreV1().Pods("").List(ctx, sel); err == nil {
		for _, p := range pods.Items {
			_ = c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, *metav1.NewDeleteOptions(0))
		}
	}
	err := c.CoreV1().Nodes().Delete(ctx, n.cfg.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", n.cfg.Name, err)
	}
	return nil
}

// removeContainers kills and removes every task and container left in
// containerd's k8s.io namespace, so that no shim outlives the node.
func (n *Node) removeContainers(ctx context.Context) {
	ctr := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, n.cfg.Binaries.Ctr(), append([]string{"--address", n.ContainerdSocket(), "-n", "k8s.io"}, args...)...).Output()
		return string(out)
	}
	tasks := strings.Fields(ctr("tasks", "ls", "-q"))
	for _, t := range tasks {
		ctr("tasks", "kill", "-s", "KILL", t)
	}
	for _, t := range tasks {
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			ctr("tasks", "rm", "-f", t)
			return !strings.Contains(ctr("tasks", "ls", "-q"), t), nil
		})
	}
	for _, c := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("containers", "rm", c)
	}
}

// proc is one child process of the node.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

func startProc(logPath, bin string, args ...string) (*proc, error) {
	return startProcEnv(logPath, nil, bin, args...)
}

// startProcEnv is startProc with env added to the process's environment.
func startProcEnv(logPath string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// containerd finds containerd-shim-runc-v2 on its PATH.
	cmd.Env = append(append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH")), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartChild(cmd); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: f}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *proc) stop(grace time.Duration) {
	if p.done() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Kill kills the kubelet or the runtime ("containerd", "crio" or
// "runtime": whichever the node runs) at once (SIGKILL), as a crash would;
// Restart* start them again.
func (n *Node) Kill(component string) {
	n.mu.Lock()
	p := n.kubelet
	if component == "containerd" || component == "crio" || component == "runtime" {
		p = n.runtime
	}
	n.mu.Unlock()
	if p != nil && !p.done() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// hostIP is the address of the host's first up, non-loopback interface:
// the kubelet refuses a loopback node IP.
func hostIP() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("realnode: no up interface with a global IPv4 address for the kubelet's node IP")
}

// tail is the end of a log file, for errors.
func tail(path string) string { return Tail(path, 4096) }

// Tail returns the last max bytes of a file (a log), or the error reading it.
func Tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Plugin reports whether the kubelet holds a live connection to the DRA
// driver's plugin, and its endpoint: the last "Connection changed" line
// the kubelet logged for the driver (at -v=2, which the node runs) says
// connected=true. The kubelet has no API that tells.
func (n *Node) Plugin(driver string) (endpoint string, ok bool) {
	b, err := os.ReadFile(n.LogPath("kubelet"))
	if err != nil {
		return "", false
	}
	return pluginInLog(string(b), driver)
}

// pluginInLog finds the driver's last "Connection changed" line in a
// kubelet log.
func pluginInLog(log, driver string) (endpoint string, ok bool) {
	// klog's structured line: "Connection changed" logger="DRA registration
	// handler" driverName="netdra.io" endpoint="..." connected=true; the
	// keys after the message are matched each on its own, in any order.
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, `"Connection changed"`)
		if i < 0 || !strings.Contains(line[i:], ` driverName="`+driver+`"`) {
			continue
		}
		rest := line[i:]
		endpoint, ok = "", strings.Contains(rest, " connected=true")
		if j := strings.Index(rest, ` endpoint="`); j >= 0 {
			endpoint = rest[j+len(` endpoint="`):]
			endpoint = endpoint[:max(0, strings.IndexByte(endpoint, '"'))]
		}
	}
	return endpoint, ok
}
