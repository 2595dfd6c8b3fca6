package operatortest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// crdDir holds the generated CRDs, relative to this package.
const crdDir = "../../../../pods/chart/netdra/files/crds"

// deadline bounds every wait for the operator or the apiserver.
const deadline = 60 * time.Second

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

var (
	crdOnce sync.Once
	crdErr  error
)

// world is one test's view of the shared control plane.
type world struct {
	t  *testing.T
	c  client.Client
	rc *rest.Config
}

// newWorld returns the control plane with the CRDs installed and no Nodes,
// NodeConfigs or ClusterConfigs, and empties it again at the test's end.
func newWorld(t *testing.T) *world {
	t.Helper()
	cp := worldtest.ControlPlane(t)
	rc := cp.RESTConfig()
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crdOnce.Do(func() { crdErr = installCRDs(rc) })
	if crdErr != nil {
		t.Fatalf("installing the CRDs: %v", crdErr)
	}
	w := &world{t: t, c: c, rc: rc}
	w.clear()
	t.Cleanup(w.clear) // runs after the operator stopped: registered first
	return w
}

// installCRDs creates (or updates) every CRD the kustomization.yaml of
// crdDir lists and waits for them to be served.
func installCRDs(rc *rest.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, err := crds.Install(ctx, rc, crdDir)
	return err
}

// clear deletes every Node, NodeConfig and ClusterConfig and waits until
// they are gone.
func (w *world) clear() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, o := range []client.Object{&v1alpha1.ClusterConfig{}, &v1alpha1.NodeConfig{}, &corev1.Node{}} {
		if err := w.c.DeleteAllOf(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			w.t.Errorf("clearing %T: %v", o, err)
		}
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var ccs v1alpha1.ClusterConfigList
		var ncs v1alpha1.NodeConfigList
		var nodes corev1.NodeList
		if w.c.List(ctx, &ccs) != nil || w.c.List(ctx, &ncs) != nil || w.c.List(ctx, &nodes) != nil {
			return false, nil
		}
		return len(ccs.Items)+len(ncs.Items)+len(nodes.Items) == 0, nil
	})
	if err != nil {
		w.t.Errorf("the cluster did not empty: %v", err)
	}
}

// operator runs an operator in-process until the test ends.
func (w *world) operator(opts controller.Options) {
	w.t.Helper()
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.Refresh == 0 {
		opts.Refresh = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, worldtest.Logger(w.t), w.rc, opts) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("operator: %v", err)
		}
	})
}

// node creates a Node with labels ("k=v").
func (w *world) node(name string, labels ...string) {
	w.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kv(labels)}}
	if err := w.c.Create(context.Background(), n); err != nil {
		w.t.Fatalf("create node %s: %v", name, err)
	}
}

// label sets a node's labels ("k=v"; "k-" removes k).
func (w *world) label(name string, labels ...string) {
	w.t.Helper()
	w.retry(func(ctx context.Context) error {
		var n corev1.Node
		if err := w.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for _, l := range labels {
			if k, ok := strings.CutSuffix(l, "-"); ok {
				delete(n.Labels, k)
				continue
			}
			k, v, _ := strings.Cut(l, "=")
			n.Labels[k] = v
		}
		return w.c.Update(ctx, &n)
	})
}

func kv(labels []string) map[string]string {
	m := map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

// selector matches the labels ("k=v").
func selector(labels ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: kv(labels)}
}

// spec is a small valid spec, told apart by its driver name.
func spec(driver string) v1alpha1.NodeConfigSpec {
	return v1alpha1.NodeConfigSpec{
		DriverName: driver,
		Pools:      []v1alpha1.Pool{{Name: "fast-net", Filter: &v1alpha1.PoolFilter{DeviceManagers: []v1alpha1.DeviceManager{v1alpha1.DeviceManagerDummy}}}},
		DeviceManagerConfigs: &v1alpha1.DeviceManagerConfigs{
			Dummy: &v1alpha1.DummyConfig{Enabled: true, Count: 3},
		},
	}
}

// clusterConfig creates a ClusterConfig and returns it as stored.
func (w *world) clusterConfig(name string, sel *metav1.LabelSelector, s v1alpha1.NodeConfigSpec) *v1alpha1.ClusterConfig {
	w.t.Helper()
	cc := &v1alpha1.ClusterConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterConfigSpec{NodeSelector: sel, Spec: s},
	}
	if err := w.c.Create(context.Background(), cc); err != nil {
		w.t.Fatalf("create ClusterConfig %s: %v", name, err)
	}
	return cc
}

// waitNextSecond waits until creating an object gets a creationTimestamp
// (1 s resolution) later than t.
func waitNextSecond(t metav1.Time) {
	time.Sleep(time.Until(t.Add(time.Second + 50*time.Millisecond)))
}

// eventually polls cond until it returns nil, failing the test with its
// last error after the deadline.
func (w *world) eventually(what string, cond func(ctx context.Context) error) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	last := errors.New("never checked")
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		w.t.Fatalf("%s: not after %s: %v", what, deadline, last)
	}
}

// retry runs f until it does not return a conflict.
func (w *world) retry(f func(ctx context.Context) error) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			w.t.Fatal(err)
		}
	}
}

// governed waits until node's NodeConfig is clusterConfig's: the
// operator's labels and clusterConfig's spec.spec, verbatim.
func (w *world) governed(node, clusterConfig string) *v1alpha1.NodeConfig {
	w.t.Helper()
	var nc v1alpha1.NodeConfig
	w.eventually(fmt.Sprintf("NodeConfig %s from ClusterConfig %s", node, clusterConfig), func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, client.ObjectKey{Name: clusterConfig}, &cc); err != nil {
			return err
		}
		if err := w.c.Get(ctx, client.ObjectKey{Name: node}, &nc); err != nil {
			return err
		}
		if nc.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByOperator || nc.Labels[v1alpha1.LabelClusterConfig] != clusterConfig {
			return fmt.Errorf("labels %v", nc.Labels)
		}
		want, _ := json.Marshal(cc.Spec.Spec)
		got, _ := json.Marshal(nc.Spec)
		if !bytes.Equal(want, got) {
			return fmt.Errorf("spec %s, want %s", got, want)
		}
		return nil
	})
	return &nc
}

// ungoverned waits until node has no NodeConfig.
func (w *world) ungoverned(node string) {
	w.t.Helper()
	w.eventually("no NodeConfig "+node, func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		err := w.c.Get(ctx, client.ObjectKey{Name: node}, &nc)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("exists, labels %v", nc.Labels)
	})
}

// status waits until the ClusterConfig's status says it governs nodes and
// its conflict condition has the status conflict, for its current
// generation, and returns that condition.
func (w *world) status(name string, nodes int32, conflict metav1.ConditionStatus) metav1.Condition {
	w.t.Helper()
	var cond metav1.Condition
	w.eventually(fmt.Sprintf("ClusterConfig %s: %d node(s), conflicting %s", name, nodes, conflict), func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, client.ObjectKey{Name: name}, &cc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(cc.Status.Conditions, v1alpha1.ConditionConflicting)
		switch {
		case c == nil:
			return fmt.Errorf("no %s condition: %+v", v1alpha1.ConditionConflicting, cc.Status)
		case cc.Status.ObservedGeneration != cc.Generation || c.ObservedGeneration != cc.Generation:
			return fmt.Errorf("observed generation %d (condition %d), generation %d", cc.Status.ObservedGeneration, c.ObservedGeneration, cc.Generation)
		case cc.Status.Nodes != nodes || c.Status != conflict:
			return fmt.Errorf("%d node(s), condition %s %s: %s", cc.Status.Nodes, c.Status, c.Reason, c.Message)
		}
		cond = *c
		return nil
	})
	return cond
}

// sync returns once the operator has reconciled with everything written
// before the call in its cache: it drifts node's generated NodeConfig and
// waits for the operator to restore it, which it can only do after its
// cache saw the drift, and so everything written before it.
func (w *world) sync(node, clusterConfig string) {
	w.t.Helper()
	w.retry(func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		if err := w.c.Get(ctx, client.ObjectKey{Name: node}, &nc); err != nil {
			return err
		}
		nc.Spec.DriverName = "drift.example.com"
		return w.c.Update(ctx, &nc)
	})
	w.governed(node, clusterConfig)
}

func (w *world) get(name string, obj client.Object) {
	w.t.Helper()
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: name}, obj); err != nil {
		w.t.Fatalf("get %s: %v", name, err)
	}
}

func (w *world) delete(obj client.Object) {
	w.t.Helper()
	if err := w.c.Delete(context.Background(), obj); err != nil {
		w.t.Fatalf("delete %s: %v", obj.GetName(), err)
	}
}

func key(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

// clientNegotiator decodes metav1 objects (Tables) from JSON.
func clientNegotiator() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	if err := metav1.AddMetaToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s).WithoutConversion()
}
