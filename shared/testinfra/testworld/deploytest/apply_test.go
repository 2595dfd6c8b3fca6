package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// deadline bounds every wait on the apiserver.
const deadline = time.Minute

// applier applies rendered objects to the test world's apiserver the way
// `kubectl apply --server-side` does, with strict field validation.
type applier struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	cp := worldtest.ControlPlane(t)
	rc := cp.RESTConfig()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{client: cp.Client(), dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// resource is where o is served.
func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a CRD applied since the last discovery
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource), nil
	}
	if o.GetNamespace() == "" {
		return nil, fmt.Errorf("a namespaced %s without a namespace: it would land in the user's current one", gvk.Kind)
	}
	return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
}

// apply applies o server-side, only as a dry run when dryRun is set.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	ri, err := a.resource(o)
	if err != nil {
		return err
	}
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: "netdra-deploytest", Force: &force, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
	return err
}

// applyAll applies objs: namespaces and CRDs for real and first (waiting
// until the CRDs are served and the namespaces have their default
// ServiceAccount), then everything else, as a dry run unless real is set.
// Each failure is a test error naming the object.
func (a *applier) applyAll(t *testing.T, objs []*unstructured.Unstructured, real bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var crds, namespaces []string
	first := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition"
	}
	for _, o := range objs {
		if !first(o) {
			continue
		}
		if err := a.apply(ctx, o, false); err != nil {
			t.Errorf("%s: %v", describe(o), err)
			continue
		}
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o.GetName())
		} else {
			crds = append(crds, o.GetName())
		}
	}
	for _, name := range crds {
		a.waitEstablished(t, ctx, name)
	}
	for _, ns := range namespaces {
		a.waitDefaultServiceAccount(t, ctx, ns)
	}
	if t.Failed() {
		t.FailNow()
	}
	a.mapper.Reset()
	for _, o := range objs {
		if first(o) {
			continue
		}
		if err := a.apply(ctx, o, !real); err != nil {
			t.Errorf("%s: %v", describe(o), err)
		}
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (a *applier) waitEstablished(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crd, err := a.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			c, _ := c.(map[string]any)
			if c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("CRD %s not established: %v", name, err)
	}
}

func (a *applier) waitDefaultServiceAccount(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := a.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("namespace %s has no default ServiceAccount: %v", ns, err)
	}
}

// TestManifests_ServerSideDryRun applies every object of the base, the dev
// overlay and the examples with a server-side dry run: the apiserver's
// schema, strict field validation, defaulting and validation (pod template
// security contexts, RBAC rules, the CRDs' OpenAPI and CEL rules for the
// example ClusterConfig and NodeConfig, the DeviceClasses' CEL
// selectors...) all pass.
func TestManifests_ServerSideDryRun(t *testing.T) {
	a := newApplier(t)
	for _, dir := range []string{base, dev} {
		t.Run(dir, func(t *testing.T) {
			a.applyAll(t, render(t, dir), false)
		})
	}
	t.Run(examples, func(t *testing.T) {
		// The examples' custom resources need the base's CRDs.
		var crds []*unstructured.Unstructured
		for _, o := range render(t, base) {
			if o.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, o)
			}
		}
		a.applyAll(t, crds, true)
		objs := append(render(t, examples), readFile(t, "examples/node-config.yaml")...)
		a.applyAll(t, objs, false)
	})
}

// TestManifests_DryRunCatchesErrors makes sure the dry run is no
// formality: a manifest the apiserver must refuse is refused.
func TestManifests_DryRunCatchesErrors(t *testing.T) {
	a := newApplier(t)
	ds := find(t, render(t, base), "DaemonSet", "netdra-node").DeepCopy()
	a.applyAll(t, []*unstructured.Unstructured{find(t, render(t, base), "Namespace", "netdra-system")}, true)
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	for _, c := range containers { // nri, with allowPrivilegeEscalation: false
		if c.(map[string]any)["name"] == "nri" {
			c.(map[string]any)["securityContext"].(map[string]any)["privileged"] = true
		}
	}
	if err := unstructured.SetNestedSlice(ds.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.apply(ctx, ds, true); !apierrors.IsInvalid(err) {
		t.Errorf("privileged with allowPrivilegeEscalation false: got %v, want Invalid", err)
	}
	unknown := find(t, render(t, base), "Deployment", "netdra-operator").DeepCopy()
	if err := unstructured.SetNestedField(unknown.Object, int64(2), "spec", "replica"); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(ctx, unknown, true); err == nil {
		t.Error("an unknown field passed strict validation")
	}
	// The CRDs' own validation applies to the examples' custom resources.
	var crds []*unstructured.Unstructured
	for _, o := range render(t, base) {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		}
	}
	a.applyAll(t, crds, true)
	nc := readFile(t, "examples/node-config.yaml")[0]
	pools, _, _ := unstructured.NestedSlice(nc.Object, "spec", "pools")
	pools[0].(map[string]any)["name"] = "host/net"
	if err := unstructured.SetNestedSlice(nc.Object, pools, "spec", "pools"); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(ctx, nc, true); !apierrors.IsInvalid(err) {
		t.Errorf("a pool name with '/': got %v, want Invalid", err)
	}
}

var (
	installOnce sync.Once
	installOK   bool
)

// installBase applies the base for real, once per test binary.
func installBase(t *testing.T, a *applier) {
	t.Helper()
	installOnce.Do(func() {
		installOK = t.Run("install base", func(t *testing.T) { a.applyAll(t, render(t, base), true) })
	})
	if !installOK {
		t.Fatal("installing the base failed")
	}
}

// podFrom is a pod with the template's metadata and spec.
func podFrom(name, namespace string, tmpl corev1.PodTemplateSpec) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec:       tmpl.Spec,
	}
}

// TestManifests_PodsAdmitted creates, as a dry run, the pods the node
// DaemonSets and the operator Deployment would create, with the base
// installed: pod admission passes (Pod Security for the namespace, the
// ServiceAccounts, the priority classes, the projected token volume).
func TestManifests_PodsAdmitted(t *testing.T) {
	a := newApplier(t)
	installBase(t, a)
	objs := render(t, base)
	sets := nodeDaemonSets(t, base)
	dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "netdra-operator"))
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, pod := range []*corev1.Pod{
		podFrom("netdra-node-test", sets.node.Namespace, sets.node.Spec.Template),
		podFrom("netdra-sockets-test", sets.holder.Namespace, sets.holder.Spec.Template),
		podFrom("netdra-operator-test", dep.Namespace, dep.Spec.Template),
	} {
		got, err := a.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("pod of %s: %v", pod.Name, err)
			continue
		}
		if got.Spec.Priority == nil || *got.Spec.Priority < 1_000_000_000 {
			t.Errorf("pod of %s: priority %v, want a system-critical one", pod.Name, got.Spec.Priority)
		}
	}
}
