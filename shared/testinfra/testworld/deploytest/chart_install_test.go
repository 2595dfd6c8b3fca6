package deploytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	helmbin "github.com/netdra/netdra/shared/testinfra/testworld/internal/helm"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// releaseNS is the namespace the chart is installed into: not netdra-system.
const releaseNS = "net-other"

// helmUser runs helm against a control plane as a user does, with its own
// configuration, cache and data directories.
type helmUser struct {
	bin, kubeconfig, home string
}

func newHelmUser(t *testing.T, cp *controlplane.ControlPlane) *helmUser {
	t.Helper()
	return &helmUser{bin: helmbin.Binary(t), kubeconfig: cp.Kubeconfig(), home: t.TempDir()}
}

// try runs helm and returns its combined output and error.
func (h *helmUser) try(args ...string) (string, error) {
	cmd := exec.Command(h.bin, append(args, "--kubeconfig", h.kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"), "HELM_DATA_HOME="+filepath.Join(h.home, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (h *helmUser) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := h.try(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// chartVariant copies the chart into a temporary directory and lets edit
// change it: an earlier or a later release of it.
func chartVariant(t *testing.T, version string, edit func(dir string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "netdra")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(podsDir, chart))); err != nil {
		t.Fatal(err)
	}
	replaceIn(t, filepath.Join(dir, "Chart.yaml"), "\nversion: ", "\nversion: "+version+"\n# was: ")
	edit(dir)
	return dir
}

// replaceIn replaces the one occurrence of old in file.
func replaceIn(t *testing.T, file, old, new string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once", file, old, n)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// shortNamesOf is the NodeConfig CRD's shortNames in the cluster.
func shortNamesOf(t *testing.T, cp *controlplane.ControlPlane) []string {
	t.Helper()
	c, err := apiextclient.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crd, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), "nodeconfigs.netdra.io", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the NodeConfig CRD: %v", err)
	}
	return crd.Spec.Names.ShortNames
}

// TestChart_InstallUpgradeUninstall installs the chart with helm into a
// control plane of its own, into namespace net-other, as a user upgrading
// from the chart's first release would, and follows the chart README's
// "Upgrade and the CRDs":
//
//   - the first release (its CRDs in Helm's crds/, which Helm installs
//     once and never upgrades; the NodeConfig CRD without its short name
//     ndnc) installed;
//   - helm upgrade to this chart refuses to take over those CRDs; once
//     given to the release as the README says, the upgrade updates them
//     (ndnc is there);
//   - every namespaced object is in net-other, and the operator's and
//     dra's ServiceAccounts there may make every request their code makes
//     (SubjectAccessReviews, as their tokens present them);
//   - dra's token, bound to a pod on a node, may write that node's
//     ResourceSlices and no other node's (the chart's admission policy);
//   - helm upgrade to a later chart whose CRD changed changes the CRD;
//   - helm uninstall keeps the CRDs, and a new install takes them back.
func TestChart_InstallUpgradeUninstall(t *testing.T) {
	cp := worldtest.NewControlPlane(t)
	h := newHelmUser(t, cp)
	current := filepath.Join(podsDir, chart)
	first := chartVariant(t, "0.1.0", func(dir string) {
		// The CRDs in crds/, untemplated, as the first release had them.
		if err := os.Rename(filepath.Join(dir, "files", "crds"), filepath.Join(dir, "crds")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "crds", "kustomization.yaml")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "templates", "crds.yaml")); err != nil {
			t.Fatal(err)
		}
		replaceIn(t, filepath.Join(dir, "crds", "netdra.io_nodeconfigs.yaml"), "    shortNames:\n    - ndnc\n", "")
	})
	later := chartVariant(t, "9.9.9", func(dir string) {
		replaceIn(t, filepath.Join(dir, "files", "crds", "netdra.io_nodeconfigs.yaml"), "    - ndnc\n", "    - ndnc\n    - ndnc9\n")
	})

	h.run(t, "install", "netdra", first, "-n", releaseNS, "--create-namespace")
	if got := shortNamesOf(t, cp); len(got) != 0 {
		t.Fatalf("the first release's NodeConfig CRD has short names %q", got)
	}

	t.Run("upgrade takes over the CRDs once given to the release", func(t *testing.T) {
		out, err := h.try("upgrade", "netdra", current, "-n", releaseNS)
		if err == nil || !strings.Contains(out, "CustomResourceDefinition") {
			t.Fatalf("helm upgrade took over CRDs it did not install: %v\n%s", err, out)
		}
		// The README's kubectl label and kubectl annotate.
		c, err := apiextclient.NewForConfig(cp.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, crd := range []string{"nodeconfigs.netdra.io", "clusterconfigs.netdra.io"} {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},`+
				`"annotations":{"meta.helm.sh/release-name":"netdra","meta.helm.sh/release-namespace":%q}}}`, releaseNS)
			if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Patch(context.Background(), crd,
				"application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		h.run(t, "upgrade", "netdra", current, "-n", releaseNS)
		if got := shortNamesOf(t, cp); !slices.Equal(got, []string{"ndnc"}) {
			t.Errorf("after helm upgrade, the NodeConfig CRD's short names are %q, want [ndnc]", got)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("in the release namespace", func(t *testing.T) {
		client := cp.Client()
		ctx := context.Background()
		for _, get := range []func() error{
			func() error {
				_, err := client.AppsV1().DaemonSets(releaseNS).Get(ctx, "netdra-node", metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := client.AppsV1().Deployments(releaseNS).Get(ctx, "netdra-operator", metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := client.CoreV1().ServiceAccounts(releaseNS).Get(ctx, "netdra-dra", metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := client.RbacV1().Roles(releaseNS).Get(ctx, "netdra-operator-leader-election", metav1.GetOptions{})
				return err
			},
		} {
			if err := get(); err != nil {
				t.Error(err)
			}
		}
		inRelease := func(list []access) []access {
			out := slices.Clone(list)
			for i := range out {
				if out[i].namespace == ns {
					out[i].namespace = releaseNS
				}
			}
			return out
		}
		for sa, needs := range map[string][]access{"netdra-operator": inRelease(operatorNeeds), "netdra-dra": draNeeds} {
			for _, acc := range needs {
				sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:" + releaseNS + ":" + sa,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
					Extra:  map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/node-name": {"node-1"}},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: acc.verb, Group: acc.group,
						Resource: acc.resource, Subresource: acc.subresource, Namespace: acc.namespace, Name: acc.name},
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !sar.Status.Allowed {
					t.Errorf("%s in %s may not %s (%s)", sa, releaseNS, acc, sar.Status.Reason)
				}
			}
		}
	})

	t.Run("dra writes its own node's ResourceSlices only", func(t *testing.T) {
		testResourceSlicePolicy(t, cp)
	})

	t.Run("upgrade changes the CRDs", func(t *testing.T) {
		h.run(t, "upgrade", "netdra", later, "-n", releaseNS)
		if got := shortNamesOf(t, cp); !slices.Equal(got, []string{"ndnc", "ndnc9"}) {
			t.Errorf("after helm upgrade, the NodeConfig CRD's short names are %q, want [ndnc ndnc9]", got)
		}
		h.run(t, "upgrade", "netdra", current, "-n", releaseNS)
	})

	t.Run("uninstall keeps the CRDs, install takes them back", func(t *testing.T) {
		h.run(t, "uninstall", "netdra", "-n", releaseNS, "--wait")
		if got := shortNamesOf(t, cp); !slices.Equal(got, []string{"ndnc"}) {
			t.Errorf("after helm uninstall, the NodeConfig CRD's short names are %q", got)
		}
		h.run(t, "install", "netdra", current, "-n", releaseNS)
		out := h.run(t, "get", "manifest", "netdra", "-n", releaseNS)
		if !strings.Contains(out, "name: nodeconfigs.netdra.io") {
			t.Errorf("the new release does not hold the NodeConfig CRD:\n%s", out)
		}
	})
}

// testResourceSlicePolicy checks the chart's ValidatingAdmissionPolicy with
// the token the kubelet would give dra: one bound to a pod of the node
// DaemonSet's ServiceAccount on node a, which the apiserver authenticates
// with the pod's node in its user info. With it, dra may create, update and
// delete node a's ResourceSlices; it may not create one of node b or of no
// node, nor update or delete node b's; a token bound to no pod may write
// none.
func testResourceSlicePolicy(t *testing.T, cp *controlplane.ControlPlane) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cp.Client()
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := admin.CoreV1().Pods(releaseNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dra-on-node-a"},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "netdra-dra",
			Containers: []corev1.Container{{Name: "dra", Image: "ghcr.io/netdra/dra:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	asDRA := func(bound *authenticationv1.BoundObjectReference) kubernetes.Interface {
		tr, err := admin.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, "netdra-dra", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: bound},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(cp.RESTConfig())
		cfg.BearerToken = tr.Status.Token
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dra := asDRA(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	review, err := dra.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, []string{"node-a"}) {
		t.Fatalf("dra's pod-bound token names node %q, want node-a (user info %+v)", got, review.Status.UserInfo)
	}

	slice := func(name string, node *string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: "netdra.io", NodeName: node,
				Pool: resourceapi.ResourcePool{Name: "pool", Generation: 1, ResourceSliceCount: 1}},
		}
		if node == nil {
			s.Spec.AllNodes = ptr.To(true)
		}
		return s
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a refusal saying %q", what, err, want)
		}
	}
	draSlices := dra.ResourceV1().ResourceSlices()

	// The policy works once the apiserver has loaded it: until then a
	// slice of node b may be created, and is deleted again.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := draSlices.Create(ctx, slice("b-by-a", ptr.To("node-b")), metav1.CreateOptions{})
		if err == nil {
			return false, admin.ResourceV1().ResourceSlices().Delete(ctx, "b-by-a", metav1.DeleteOptions{})
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the policy never refused node-a's dra a slice of node-b: %v", err)
	}
	_, err = draSlices.Create(ctx, slice("b-by-a", ptr.To("node-b")), metav1.CreateOptions{})
	refused("dra on node-a creating a slice of node-b", err, "may not write the ResourceSlices of node node-b")
	_, err = draSlices.Create(ctx, slice("all-by-a", nil), metav1.CreateOptions{})
	refused("dra on node-a creating a slice of all nodes", err, "may not write a ResourceSlice of no node")

	own, err := draSlices.Create(ctx, slice("a-by-a", ptr.To("node-a")), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("dra on node-a creating a slice of node-a: %v", err)
	}
	own.Spec.Pool.Generation = 2
	if _, err := draSlices.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("dra on node-a updating its slice: %v", err)
	}
	if err := draSlices.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("dra on node-a deleting its slice: %v", err)
	}

	other, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice("b-by-admin", ptr.To("node-b")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Spec.Pool.Generation = 2
	_, err = draSlices.Update(ctx, other, metav1.UpdateOptions{})
	refused("dra on node-a updating node-b's slice", err, "may not write the ResourceSlices of node node-b")
	err = draSlices.Delete(ctx, other.Name, metav1.DeleteOptions{})
	refused("dra on node-a deleting node-b's slice", err, "may not write the ResourceSlices of node node-b")

	unbound := asDRA(nil)
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, slice("a-unbound", ptr.To("node-a")), metav1.CreateOptions{})
	refused("dra's token bound to no pod creating a slice", err, "no node name in its user info")

	for _, del := range []func() error{
		func() error {
			return admin.ResourceV1().ResourceSlices().Delete(ctx, "b-by-admin", metav1.DeleteOptions{})
		},
		func() error { return admin.CoreV1().Pods(releaseNS).Delete(ctx, pod.Name, metav1.DeleteOptions{}) },
		func() error { return admin.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}) },
		func() error { return admin.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
}
