package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// podsDir is the repository's pods/ folder, relative to this package.
const podsDir = "../../../../pods"

// The kustomizations CI checks, relative to podsDir.
const (
	base     = "base"
	dev      = "overlays/dev"
	examples = "examples"
)

// render builds the kustomization in podsDir/dir as kubectl apply -k would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(podsDir, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		t.Fatalf("kustomize build %s: no objects", dir)
	}
	return out
}

// readFile parses a multi-document YAML file of podsDir.
func readFile(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(podsDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range splitYAML(b) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if s := string(j); s == "null" || s == "{}" {
			continue // a comment-only document
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, o)
	}
	return out
}

func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	start := 0
	for i := 0; i+4 <= len(b); i++ {
		if (i == 0 || b[i-1] == '\n') && string(b[i:i+3]) == "---" && (i+3 == len(b) || b[i+3] == '\n') {
			docs = append(docs, b[start:i])
			start = i + 4
		}
	}
	return append(docs, b[min(start, len(b)):])
}

// find returns the one object of kind and name.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
	if i < 0 {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return objs[i]
}

// typed converts o into T, failing on fields T does not know.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

// nodeDaemonSets are netdra's two node DaemonSets as dir renders them.
func nodeDaemonSets(t *testing.T, dir string) nodeSets {
	t.Helper()
	objs := render(t, dir)
	return nodeSets{
		node:   typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-node")),
		holder: typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-sockets")),
	}
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}
