package boundaries

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/nri/plugin"
	"github.com/netdra/netdra/services/provisioner/server"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// TestDocsNumbers checks the numbers the docs (and the benchmark report's
// prose) name against their source of truth: the code's constants, the
// CRDs' schema and the rendered manifests. Each sentence must still be
// there: a rewrite that drops it drops its row here too.
func TestDocsNumbers(t *testing.T) {
	root := moduleRoot(t)
	crds := readYAMLDocs(t, filepath.Join(root, "pods/base/crds.yaml"))
	nodeContainers := daemonSetContainers(t, root, "netdra-node")
	for _, tc := range []struct {
		file string
		re   string // its groups are the numbers, in want's order
		want []int
	}{
		{"README.md", `one netdra-node pod per node, (\d+)/(\d+) ready`, []int{nodeContainers, nodeContainers}},
		{"docs/install.md", `one netdra-node pod per node, (\d+)/(\d+) ready`, []int{nodeContainers, nodeContainers}},
		{"docs/architecture.md", `(\d+) devices a slice`, []int{publish.MaxDevicesPerSlice}},
		{"docs/claims.md", `maxBlocksPerNode: \d+ +# default (\d+), at most (\d+)`,
			[]int{v1alpha1.DefaultMaxBlocksPerNode, schemaInt(t, crds, "maxBlocksPerNode", "maximum")}},
		{"docs/install.md", `at most (\d+) characters \(a slice attribute's limit\)`, []int{schemaInt(t, crds, "multusResourceName", "maxLength")}},
		{"bench/cmd/benchreport/main.go", `at most (\d+) devices at once across the node`, []int{plugin.MaxCalls}},
		{"bench/cmd/benchreport/main.go", `the provisioner moves (\d+) links at once`, []int{server.MaxMoves}},
	} {
		b, err := os.ReadFile(filepath.Join(root, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		ms := regexp.MustCompile(tc.re).FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s no longer says %q: update the sentence or this test", tc.file, tc.re)
			continue
		}
		for _, m := range ms {
			for i, w := range tc.want {
				if n, _ := strconv.Atoi(m[i+1]); n != w {
					t.Errorf("%s says %q: %d where the source says %d", tc.file, m[0], n, w)
				}
			}
		}
	}
}

// readYAMLDocs parses each document of a multi-document YAML file.
func readYAMLDocs(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var v any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
	return out
}

// schemaInt is the integer key of the schema of the property named prop,
// the same wherever the CRDs have one; it fails the test when none has it
// or two disagree.
func schemaInt(t *testing.T, docs []any, prop, key string) int {
	t.Helper()
	seen := map[int]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				if p, ok := props[prop].(map[string]any); ok {
					if n, ok := p[key].(float64); ok {
						seen[int(n)] = true
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(docs)
	if len(seen) != 1 {
		t.Fatalf("the CRDs' %s.%s: %v, want one value", prop, key, seen)
	}
	for n := range seen {
		return n
	}
	return 0
}

// daemonSetContainers is how many containers the DaemonSet name of the
// rendered manifests (pods/base) runs.
func daemonSetContainers(t *testing.T, root, name string) int {
	t.Helper()
	for _, d := range readYAMLDocs(t, filepath.Join(root, "pods/base/daemonset.yaml")) {
		var ds struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Template struct {
					Spec struct{ Containers []any }
				}
			}
		}
		b, _ := yaml.Marshal(d)
		if err := yaml.Unmarshal(b, &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Kind == "DaemonSet" && ds.Metadata.Name == name {
			return len(ds.Spec.Template.Spec.Containers)
		}
	}
	t.Fatalf("no DaemonSet %s in pods/base/daemonset.yaml", name)
	return 0
}
