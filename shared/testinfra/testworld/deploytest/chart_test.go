package deploytest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	helmbin "github.com/netdra/netdra/shared/testinfra/testworld/internal/helm"
)

// chart is the Helm chart, relative to podsDir.
const chart = "chart/netdra"

// helm runs the helm binary and returns its standard output.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(helmbin.Binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String()
}

// renderChart is `helm template netdra pods/chart/netdra -n netdra-system
// --include-crds` with the extra flags.
func renderChart(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	return renderChartIn(t, "netdra-system", extra...)
}

// renderChartIn is renderChart into the release namespace ns.
func renderChartIn(t *testing.T, ns string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", "netdra", filepath.Join(podsDir, chart), "--namespace", ns, "--include-crds"}, extra...)
	var objs []*unstructured.Unstructured
	for _, doc := range splitYAML([]byte(helm(t, args...))) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		if s := string(j); s == "null" || s == "{}" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("helm template: %v", err)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestChart_Lint runs helm lint --strict on the chart, with the default
// values and with the Namespace made by the chart.
func TestChart_Lint(t *testing.T) {
	helm(t, "lint", "--strict", filepath.Join(podsDir, chart))
	helm(t, "lint", "--strict", "--set", "namespace.create=true", filepath.Join(podsDir, chart))
}

// TestChart_ReleaseNamespace renders the chart into a namespace other than
// netdra-system, with and without the Namespace object: every namespaced
// object is in the release namespace, and every reference to a namespace
// (RBAC subjects, the Namespace itself) names it; netdra-system appears
// nowhere.
func TestChart_ReleaseNamespace(t *testing.T) {
	const ns = "net-other"
	for _, extra := range [][]string{nil, {"--set", "namespace.create=true"}} {
		objs := renderChartIn(t, ns, extra...)
		for _, o := range objs {
			j, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(j), "netdra-system") {
				t.Errorf("%s %v names netdra-system when released into %s", describe(o), extra, ns)
			}
			switch o.GetKind() {
			case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace", "DeviceClass":
			default:
				if o.GetNamespace() != ns {
					t.Errorf("%s is in namespace %q, not the release's %s", describe(o), o.GetNamespace(), ns)
				}
			}
			if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
				b := typed[rbacv1.ClusterRoleBinding](t, o)
				for _, s := range b.Subjects {
					if s.Kind == "ServiceAccount" && s.Namespace != ns {
						t.Errorf("%s binds ServiceAccount %s/%s, not in the release namespace %s", describe(o), s.Namespace, s.Name, ns)
					}
				}
			}
		}
	}
}

// TestChart_MatchesBase renders the chart with its default values and the
// kustomize base and compares every object: the same kinds, names and
// contents. Two differences are by design: the chart makes the Namespace
// only with namespace.create (helm install --create-namespace makes it
// otherwise), and its CRDs, which Helm installs untemplated from crds/,
// lack the part-of label kustomize adds.
func TestChart_MatchesBase(t *testing.T) {
	want := map[string]*unstructured.Unstructured{}
	for _, o := range render(t, base) {
		if o.GetKind() == "CustomResourceDefinition" {
			l := o.GetLabels()
			delete(l, "app.kubernetes.io/part-of")
			if len(l) == 0 {
				l = nil
			}
			o.SetLabels(l)
		}
		want[describe(o)] = o
	}
	for _, tt := range []struct {
		name  string
		extra []string
		skip  string
	}{
		{"defaults", nil, "Namespace netdra-system"},
		{"namespace.create", []string{"--set", "namespace.create=true"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]*unstructured.Unstructured{}
			for _, o := range renderChart(t, tt.extra...) {
				got[describe(o)] = o
			}
			for k, w := range want {
				g, ok := got[k]
				switch {
				case k == tt.skip:
					if ok {
						t.Errorf("the chart renders %s with the default values", k)
					}
				case !ok:
					t.Errorf("the chart renders no %s", k)
				default:
					if d := cmp.Diff(w.Object, g.Object); d != "" {
						t.Errorf("%s differs (-kustomize +chart):\n%s", k, d)
					}
				}
			}
			for k := range got {
				if want[k] == nil {
					t.Errorf("the chart renders %s, which the base has not", k)
				}
			}
		})
	}
}

// TestChart_Values renders the chart with every value changed and checks
// that each lands where it should, and that the node pod still keeps the
// privilege rules.
func TestChart_Values(t *testing.T) {
	objs := renderChart(t, "--set", "image.prefix=registry.example.com/netdra,image.tag=v1.2.3,image.pullPolicy=IfNotPresent",
		"--set", "driverName=net.example.com,operator.replicas=3,node.nodeSelector.pool=net,metrics.enabled=false",
		"--set", "node.resources.dra.limits.memory=1Gi,kubeletRootDir=/var/lib/k0s/kubelet")
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-node"))
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["pool"] != "net" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if !strings.HasPrefix(c.Image, "registry.example.com/netdra/") || !strings.HasSuffix(c.Image, ":v1.2.3") || c.ImagePullPolicy != "IfNotPresent" {
			t.Errorf("%s: image %s, pull policy %q", c.Name, c.Image, c.ImagePullPolicy)
		}
		if (c.Name == "dra" || c.Name == "nri") && !slices.Contains(c.Args, "-metrics-address=") {
			t.Errorf("%s: metrics not off: %q", c.Name, c.Args)
		}
		if c.Name == "dra" {
			if c.Resources.Limits.Memory().String() != "1Gi" {
				t.Errorf("dra: memory limit %s", c.Resources.Limits.Memory())
			}
			if !slices.Contains(c.Args, "-plugin-dir=/var/lib/k0s/kubelet/plugins") ||
				!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/lib/k0s/kubelet/plugins/net.example.com" }) {
				t.Errorf("dra: the kubelet root dir and driver name are not in its flags and mounts: %q %v", c.Args, c.VolumeMounts)
			}
		}
	}
	dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "netdra-operator"))
	if *dep.Spec.Replicas != 3 {
		t.Errorf("operator replicas %d", *dep.Spec.Replicas)
	}
	role := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "netdra-dra"))
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Equal(r.ResourceNames, []string{"net.example.com"}) }) {
		t.Errorf("dra's ClusterRole does not follow the driver name: %+v", role.Rules)
	}
}
