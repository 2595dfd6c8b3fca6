package scale

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
)

// world is the control plane, the harness's clients and the operator.
type world struct {
	o  Options
	cp *controlplane.ControlPlane
	rc *rest.Config
	c  kubernetes.Interface
	dc dynamic.Interface
	cl client.Client
	op *operator
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// startWorld starts the control plane and installs netdra's CRDs.
func startWorld(ctx context.Context, o Options) (*world, error) {
	cpDir := filepath.Join(o.Dir, "cp")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return nil, err
	}
	// A copy of the binary of its own: the shared one may be rebuilt from
	// another checkout before the control plane's restart.
	shared, err := controlplane.Binary(ctx, o.Logger)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(o.Dir, "testworld")
	if err := copyFile(shared, bin); err != nil {
		return nil, fmt.Errorf("copying the testworld binary: %w", err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: cpDir, Logger: o.Logger, Binary: bin})
	if err != nil {
		return nil, err
	}
	w := &world{o: o, cp: cp, rc: cp.RESTConfig()}
	fail := func(err error) (*world, error) {
		w.stop()
		return nil, err
	}
	// The harness's own client: node creation and pod creation in bursts.
	hrc := cp.RESTConfig()
	hrc.QPS, hrc.Burst = 1000, 2000
	if w.c, err = kubernetes.NewForConfig(hrc); err != nil {
		return fail(err)
	}
	if w.dc, err = dynamic.NewForConfig(hrc); err != nil {
		return fail(err)
	}
	ctrllog.SetLogger(logr.Discard())
	if w.cl, err = client.New(hrc, client.Options{Scheme: scheme}); err != nil {
		return fail(err)
	}
	crdDir := filepath.Join(o.RepoDir, "pods", "chart", "netdra", "files", "crds")
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := crds.Install(ictx, w.rc, crdDir); err != nil {
		return fail(fmt.Errorf("installing the CRDs: %w", err))
	}
	return w, nil
}

// operator is netdra's operator process, restarted when it exits as its
// Deployment's pod would be: exits counts those, first holds the log's
// last lines at the first.
type operator struct {
	bin, kubeconfig, logPath string
	metricsAddr              string // its Prometheus endpoint, host:port

	mu      sync.Mutex
	cmd     *exec.Cmd
	exits   int
	first   string
	stopped bool
	done    chan struct{}
}

// startOperator builds netdra's operator from the checkout and runs it
// against the control plane, with leader election as it is deployed, and
// its metrics served on a free loopback port.
func (w *world) startOperator(ctx context.Context) (*operator, error) {
	bin := filepath.Join(w.o.Dir, "operator")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", bin, "./services/operator")
	build.Dir = w.o.RepoDir
	// The environment's GOFLAGS stay (make's build configuration), so
	// that the operator's packages are the ones the other builds of a
	// make run compiled.
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the operator: %w: %s", err, out)
	}
	port, err := testenv.PortOn()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	op := &operator{bin: bin, kubeconfig: w.cp.Kubeconfig(), logPath: filepath.Join(w.o.Dir, "operator.log"),
		metricsAddr: addr, done: make(chan struct{})}
	if err := op.start(); err != nil {
		return nil, err
	}
	go op.supervise()
	w.op = op
	return op, nil
}

func (op *operator) start() error {
	lf, err := os.OpenFile(op.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close() // the child holds its own descriptor
	cmd := exec.Command(op.bin, "-kubeconfig", op.kubeconfig, "-leader-election-namespace", "default",
		"-metrics-addr", op.metricsAddr, "-health-addr", "", "-log-level", "warn", "-log-format", "text")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartChild(cmd); err != nil {
		return err
	}
	op.mu.Lock()
	op.cmd = cmd
	op.mu.Unlock()
	return nil
}

// supervise waits for the operator and starts it again a second after it
// exits, until stop.
func (op *operator) supervise() {
	defer close(op.done)
	for {
		op.mu.Lock()
		cmd := op.cmd
		op.mu.Unlock()
		err := cmd.Wait()
		op.mu.Lock()
		if op.stopped {
			op.mu.Unlock()
			return
		}
		op.exits++
		if op.first == "" {
			op.first = fmt.Sprintf("%v: %s", err, exitLine(op.logPath))
		}
		op.mu.Unlock()
		time.Sleep(time.Second)
		if err := op.start(); err != nil {
			op.mu.Lock()
			op.first += fmt.Sprintf("; not restarted: %v", err)
			op.mu.Unlock()
			return
		}
	}
}

// exitLine is the operator log's last line saying why it exited, else
// its last line.
func exitLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "msg=Exiting") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// proc reads the running operator's CPU and memory; cpu counts only the
// current process (see since).
func (op *operator) proc() proc {
	op.mu.Lock()
	pid := op.cmd.Process.Pid
	op.mu.Unlock()
	p, _ := readProc(pid)
	return p
}

// since is after - before for a counter of the operator's process, or
// after alone when it was started again in between (exits changed): the
// count of the new process, which misses the old one's part.
func since(before, after float64, exitsBefore, exitsAfter int) float64 {
	if exitsAfter != exitsBefore {
		return after
	}
	return after - before
}

// restarts are how many times the operator exited, and what the first
// exit said.
func (op *operator) restarts() (int, string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.exits, op.first
}

// metrics scrapes the operator's own /metrics.
func (op *operator) metrics(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+op.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseSample(raw), nil
}

func (op *operator) stop() {
	op.mu.Lock()
	op.stopped = true
	cmd := op.cmd
	op.mu.Unlock()
	_ = cmd.Process.Kill()
	<-op.done
}

func (w *world) stop() {
	if w.op != nil {
		w.op.stop()
	}
	_ = w.cp.Stop()
}

// copyFile copies src to dst, executable.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// createNode creates a Node as a kubelet would register it, Ready, with
// room for pods; nothing updates it after (no heartbeats: the
// controller-manager runs without node-lifecycle).
func createNode(ctx context.Context, c kubernetes.Interface, name string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", nodeLabel: "true"}}}
	if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return err
	}
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	// The controller-manager changes a new Node too (its podCIDR): the
	// status goes on the Node as it is then. The apiserver taints a new
	// Node not-ready (TaintNodesByCondition); the node-lifecycle
	// controller, which would lift the taint once the Node is Ready, does
	// not run, so the taint is lifted here.
	return retryConflict(ctx, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
			if n, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room, Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// parallel runs f on each item, at most n at once, and returns the first
// error.
func parallel(ctx context.Context, n int, items []string, f func(context.Context, string) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range max(n, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) || ctx.Err() != nil {
					return
				}
				if err := f(ctx, items[i]); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", items[i], err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// retryConflict runs f again while it fails with a conflict.
func retryConflict(ctx context.Context, f func() error) error {
	for {
		err := f()
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			return err
		}
	}
}

// waitAll waits until every one of n nodes is applied and published in
// the tracker's round, logging progress every 10 s.
func waitAll(ctx context.Context, tr *tracker, n int, deadline time.Duration, log interface{ Info(string, ...any) }, what string) (applied, published map[string]time.Duration, err error) {
	end := time.Now().Add(deadline)
	last := time.Now()
	for {
		applied, published = tr.done()
		if len(applied) >= n && len(published) >= n {
			return applied, published, nil
		}
		if time.Now().After(end) {
			return applied, published, fmt.Errorf("%s: after %s, %d of %d NodeConfigs applied and %d of %d nodes' slices published",
				what, deadline, len(applied), n, len(published), n)
		}
		if time.Since(last) > 10*time.Second {
			log.Info("waiting", "phase", what, "applied", len(applied), "published", len(published), "of", n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return applied, published, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func maxOf(m map[string]time.Duration) time.Duration {
	var out time.Duration
	for _, d := range m {
		out = max(out, d)
	}
	return out
}

// pct is the p-th percentile of m's durations, in seconds.
func pct(m map[string]time.Duration, p float64) float64 {
	var s []float64
	for _, d := range m {
		s = append(s, d.Seconds())
	}
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, int(p/100*float64(len(s))))]
}

func scaleMap(m map[string]float64, f float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v * f
	}
	return out
}
