package deploytest

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// installPatch finds docs/install.md's JSON patch for a kubelet root dir
// other than /var/lib/kubelet: its lines {op: replace, path: P, value: V}.
var installPatch = regexp.MustCompile(`\{op: replace, path: (/spec/template/spec/\S+), value: (\S+)\}`)

// patchTarget finds the DaemonSet each of docs/install.md's patches
// targets: the text from one target to the next holds its operations.
var patchTarget = regexp.MustCompile(`target: \{kind: DaemonSet, name: (\S+)\}`)

// TestInstallDoc_KubeletRootPatch checks docs/install.md's patch for another
// kubelet root dir against the base's DaemonSets (netdra-node and
// netdra-sockets, both of which mount the kubelet's directories): each
// index-based path must still point at the field it means to change (a
// /var/lib/kubelet path, or dra's flag naming one), so a volume or mount
// added to the base cannot silently turn the documented patch onto
// another field, and every /var/lib/kubelet value of the base is patched.
func TestInstallDoc_KubeletRootPatch(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	targets := patchTarget.FindAllStringSubmatchIndex(doc, -1)
	var names []string
	for k, m := range targets {
		name := doc[m[2]:m[3]]
		names = append(names, name)
		end := len(doc)
		if k+1 < len(targets) {
			end = targets[k+1][0]
		}
		t.Run(name, func(t *testing.T) {
			checkKubeletRootPatch(t, find(t, render(t, base), "DaemonSet", name).Object, installPatch.FindAllStringSubmatch(doc[m[1]:end], -1))
		})
	}
	if !slices.Equal(names, []string{"netdra-node", "netdra-sockets"}) {
		t.Errorf("docs/install.md patches the DaemonSets %q, want netdra-node and netdra-sockets", names)
	}
}

// checkKubeletRootPatch checks the patch operations ops against ds.
func checkKubeletRootPatch(t *testing.T, ds map[string]any, ops [][]string) {
	t.Helper()
	// Every /var/lib/kubelet value of the DaemonSet is patched: one left
	// out keeps a container on the default root.
	var want []string
	kubeletValues(ds, "", func(p string) { want = append(want, p) })
	var patched []string
	for _, op := range ops {
		patched = append(patched, op[1])
	}
	slices.Sort(want)
	slices.Sort(patched)
	if !slices.Equal(patched, want) {
		t.Errorf("docs/install.md's kubelet root dir patch replaces %q, want every /var/lib/kubelet value of the base's DaemonSet: %q", patched, want)
	}
	for _, op := range ops {
		cur, err := pointer(ds, op[1])
		if err != nil {
			t.Errorf("docs/install.md patch path %s: %v", op[1], err)
			continue
		}
		// The page's example root is /var/lib/k0s/kubelet: each value is
		// the base's with that root.
		want := strings.Replace(op[2], "/var/lib/k0s/kubelet", "/var/lib/kubelet", 1)
		if old, _ := cur.(string); old != want || want == op[2] {
			t.Errorf("docs/install.md patch %s sets %s, but the base has %q there (want %q)", op[1], op[2], old, want)
		}
	}
}

// kubeletValues calls found with the JSON pointer of each string under
// the pod template's spec that names a /var/lib/kubelet path.
func kubeletValues(v any, at string, found func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			kubeletValues(e, at+"/"+k, found)
		}
	case []any:
		for i, e := range v {
			kubeletValues(e, at+"/"+strconv.Itoa(i), found)
		}
	case string:
		if strings.HasPrefix(at, "/spec/template/spec/") && strings.Contains(v, "/var/lib/kubelet") {
			found(at)
		}
	}
}

// pointer resolves a JSON pointer in an unstructured object.
func pointer(obj map[string]any, path string) (any, error) {
	var cur any = obj
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(v) {
				return nil, os.ErrNotExist
			}
			cur = v[i]
		default:
			return nil, os.ErrNotExist
		}
	}
	return cur, nil
}
