package boundaries

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/services/dra/driver"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/services/nri/plugin"
	"github.com/netdra/netdra/services/provisioner/server"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/hostiletest"
)

// kubeletPrepareTimeout is the kubelet's timeout of a DRA plugin's
// NodePrepareResources, in seconds: Kubernetes' figure
// (k8s.io/kubernetes/pkg/kubelet/cm/dra), in no module of the product.
const kubeletPrepareTimeout = 45

// numberRow is a sentence of a page that states figures: re matches it,
// its groups are the figures, in want's order; want is what the source
// of truth says (the code's constants, the Makefile's defaults, the CRDs'
// schema, the rendered manifests, the chart's alert rules).
type numberRow struct {
	file string
	re   string
	want []float64
}

// docNumberRows is every sentence of the docs (and of the benchmark
// report's prose) that states a figure of netdra, with its source of
// truth. A figure with a unit of time, size or rate that no row covers
// fails TestDocsNumbersAllChecked: a measured figure belongs in
// bench/RESULTS.md, not in a page.
func docNumberRows(t *testing.T, root string) []numberRow {
	t.Helper()
	crds := readYAMLDocs(t, filepath.Join(root, "pods/base/crds.yaml"))
	nodeContainers := float64(daemonSetContainers(t, root, "netdra-node"))
	mk := readMakefile(t, root)
	chaos := codeNumbers(t, root, "shared/testinfra/testworld/e2e/chaos_test.go", `delay := time\.Duration\((\d+)\+cs\.rng\.IntN\((\d+)\)\) \* time\.Millisecond`)
	peerRepeat := codeNumbers(t, root, "shared/rpc/peerwatch.go", `peerRepeat = (\d+) \* time\.Second`)[0]
	hookWait := codeNumbers(t, root, "services/nri/cmd/netdra-hook/netns.go", `DefaultWait = (\d+) \* time\.Second`)[0]
	shape := codeNumbers(t, root, "services/provisioner/link/shape.go", `shapeBurstTime = ([\d.]+)`, `shapeMinBurst  = (\d+) << 10`, `shapeLatency = ([\d.]+)`)
	shapeTest := codeNumbers(t, root, "services/provisioner/link/shape_netns_test.go", `const share = ([\d_]+)`, `w\.throughput\(t, (\d+)\*time\.Second\)`, `if rate > ([\d.]+)\*share \|\| rate < ([\d.]+)\*share`)
	tenG, err := v1alpha1.BitsPerSecond("10G")
	if err != nil {
		t.Fatal(err)
	}
	chaosRuns := codeNumbers(t, root, "shared/testinfra/testworld/e2e/chaos_test.go", `chaosCILifecycles += (\d+)`, `chaosCRIOLifecycles += (\d+)`)
	scaleNode := codeNumbers(t, root, "shared/testinfra/testworld/scale/scale_test.go", `PFs: (\d+), VFsPerPF: (\d+)`)
	footprint := codeNumbers(t, root, "shared/testinfra/testworld/benchworld/footprint_test.go",
		`footprintDevices += (\d+)`, `footprintChurn += (\d+)`, `footprintPrepares = (\d+)`)
	alerts := codeNumbers(t, root, "pods/chart/netdra/templates/monitoring.yaml",
		`devices_lost_total\[(\d+)m\]`, `result="error"\}\[(\d+)m\]`, `restarts_total\{.*?\}\[(\d+)m\]`)
	return []numberRow{
		{"README.md", `one netdra-node pod per node, (\d+)/(\d+) ready`, []float64{nodeContainers, nodeContainers}},
		{"docs/install.md", `one netdra-node pod per node, (\d+)/(\d+) ready`, []float64{nodeContainers, nodeContainers}},
		{"docs/architecture.md", `(\d+) devices a slice`, []float64{publish.MaxDevicesPerSlice}},
		{"docs/claims.md", `maxBlocksPerNode: \d+ +# default (\d+), at most (\d+)`,
			[]float64{v1alpha1.DefaultMaxBlocksPerNode, schemaInt(t, crds, "maxBlocksPerNode", "maximum")}},
		{"docs/install.md", `at most (\d+) characters \(a slice attribute's limit\)`, []float64{schemaInt(t, crds, "multusResourceName", "maxLength")}},
		{"bench/targets.yaml", `at most (\d+) devices at once across the node`, []float64{plugin.MaxCalls}},
		{"bench/targets.yaml", `the provisioner moves (\d+) links at once`, []float64{server.MaxMoves}},
		{"docs/architecture.md", `restarted ([\d.]+)-([\d.]+) s later`, []float64{chaos[0] / 1000, (chaos[0] + chaos[1]) / 1000}},
		{"docs/architecture.md", `for up to (\d+) s of the kubelet's (\d+) s`, []float64{driver.DefaultRideOut.Seconds(), kubeletPrepareTimeout}},
		{"docs/architecture.md", `is retried for (\d+) s\.`, []float64{driver.DefaultRideOut.Seconds() / 4}},
		{"docs/architecture.md", `within the kubelet's\s+(\d+) s\)`, []float64{kubeletPrepareTimeout}},
		{"docs/architecture.md", `Attach. waits at most (\d+) s for a lease`, codeNumbers(t, root, "services/provisioner/link/dhcp.go", `DHCPTimeout = (\d+) \* time\.Second`)},
		{"docs/architecture.md", `every (\d+) s whether it still holds`, codeNumbers(t, root, "services/dra/sockkeep/dra.go", `holderCheckInterval = (\d+) \* time\.Second`)},
		{"docs/architecture.md", `when it starts waiting and every (\d+) s\.`, codeNumbers(t, root, "shared/process/takeover.go", `standByLog = (\d+) \* time\.Second`)},
		{"docs/architecture.md", `\(it tries every\s+(\d+) ms\)`, codeNumbers(t, root, "shared/process/takeover.go", `standByPoll = (\d+) \* time\.Millisecond`)},
		{"docs/architecture.md", "`10G` is (\\d+) Gbit/s", []float64{float64(tenG) / 1e9}},
		{"docs/architecture.md", `a burst of (\d+) ms at the rate, at least (\d+) KiB; (\d+) ms`, []float64{shape[0] * 1000, shape[1], shape[2] * 1000}},
		{"docs/architecture.md", `a macvlan with a\s+(\d+) Mbit/s share, a Go TCP sender for (\d+) s`, []float64{shapeTest[0] / 1e6, shapeTest[1]}},
		{"docs/architecture.md", `must send between (\d+)% and (\d+)%`, []float64{math.Round(shapeTest[3] * 100), math.Round(shapeTest[2] * 100)}},
		{"docs/architecture.md", `under a (\d+) Mbit/s`, codeNumbers(t, root, "shared/testinfra/testworld/e2e/subif_capacity_test.go", `deviceClass\(t, c, "shared"\), "(\d+)M"\)`)},
		{"docs/architecture.md", `It waits up to (\d+) s\s+for a manager`, codeNumbers(t, root, "services/provisioner/server/restore.go", `restoreWait = (\d+) \* time\.Second`)},
		{"docs/architecture.md", `unreachable for\s+(\d+) s is also logged \(` + "`Cannot reach a peer`" + `\), again every (\d+) s`, []float64{rpc.DefaultPeerGrace.Seconds(), peerRepeat}},
		{"docs/operations.md", `unreachable for (\d+) s is also logged \(` + "`Cannot reach a peer`" + `\), again every (\d+) s`, []float64{rpc.DefaultPeerGrace.Seconds(), peerRepeat}},
		{"docs/architecture.md", `up to (\d+) s, for a burst`, []float64{hookWait}},
		{"docs/architecture.md", `waiting up\s+to (\d+) s for them`, []float64{hookWait}},
		{"docs/architecture.md", `within its ([\d.]+) s, holding`, []float64{plugin.HookTimeout.Seconds()}},
		{"docs/claims.md", `refreshed every (\d+) s`, codeNumbers(t, root, "services/dra/nodeconfig/ippoolwatch.go", `ipPoolsCheck = (\d+) \* time\.Second`)},
		{"docs/operations.md", `rose in the last (\d+) minutes: a device's link`, alerts[:1]},
		{"docs/operations.md", `prepare",result="error"\}` + "`" + ` rose in the last (\d+) minutes`, alerts[1:2]},
		{"docs/operations.md", `times in (\d+) minutes \(kube-state-metrics`, alerts[2:3]},
		{"docs/operations.md", `is (\d+) bytes\) are longer than a unix socket address may be \((\d+)\)`,
			[]float64{float64(len(strings.Replace(socketExample, "<uid>", "00000000-0000-0000-0000-000000000000", 1))), float64(len(unix.RawSockaddrUnix{}.Path) - 1)}},
		{"docs/testing.md", "`FUZZTIME` \\((\\d+)s by default\\)", []float64{durationSeconds(t, mk.defaults["FUZZTIME"])}},
		{"docs/testing.md", `FUZZTIME=(\d+)s`, nil}, // an example value of a longer run: covered, nothing to check
		{"docs/testing.md", `\((\d+) MiB strings, ([\d,]+)-entry lists`, []float64{hostiletest.BigString >> 20, hostiletest.ManyEntries}},
		{"docs/testing.md", `serving (\d+) PFs x (\d+) VFs`, scaleNode},
		{"docs/testing.md", `run it once with (\d+)\s+nodes \(` + "`TestScale_Smoke`", codeNumbers(t, root, "shared/testinfra/testworld/scale/scale_test.go", `o := options\(t, (\d+), `)},
		{"docs/testing.md", `a short chaos run\s+there \((\d+) lifecycles`, chaosRuns[1:2]},
		{"docs/architecture.md", `In the end-to-end runs \((\d+) lifecycles`, chaosRuns[:1]},
		{"docs/architecture.md", `the end-to-end\s+tests run (\d+) lifecycles`, chaosRuns[:1]},
		{"docs/testing.md", `publishes (\d+) host veths`, footprint[:1]},
		{"docs/testing.md", `\(p50 and p99 of (\d+), with`, footprint[2:3]},
		{"docs/testing.md", `rounds of (\d+) pods with\s+a claim`, footprint[1:2]},
		{"docs/testing.md", `runs the long chaos test \((\d+) pod lifecycles`, []float64{mkNumber(t, mk, "CHAOS_LIFECYCLES")}},
		{"docs/architecture.md", `it is tried (\d+) times, then`, codeNumbers(t, root, "services/dra/driver/statuslater.go", `const statusAttempts = (\d+)`)},
		{"docs/architecture.md", `longer than (\d+) characters is`, []float64{slicepool.MaxLen}},
		{"docs/testing.md", `runs it for (\d+) minutes`, codeNumbers(t, root, "shared/testinfra/testworld/e2e/soak_test.go", `soakCIDuration = (\d+) \* time\.Minute`)},
	}
}

// socketExample is the path of a socket docs/operations.md gives, whose
// length it states.
const socketExample = "/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/sockets/provisioner.sock"

// codeNumbers reads, for each regexp, the number its first group matches
// in the file (underscores as Go writes them allowed); more groups of one
// regexp give more numbers.
func codeNumbers(t *testing.T, root, file string, res ...string) []float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, re := range res {
		m := regexp.MustCompile(re).FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("%s no longer matches %q: update the row that reads it", file, re)
		}
		for _, g := range m[1:] {
			n, err := strconv.ParseFloat(strings.ReplaceAll(g, "_", ""), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", file, re, err)
			}
			out = append(out, n)
		}
	}
	return out
}

// mkNumber is the Makefile's default of variable name, a number.
func mkNumber(t *testing.T, mk makefile, name string) float64 {
	t.Helper()
	n, err := strconv.ParseFloat(mk.defaults[name], 64)
	if err != nil {
		t.Fatalf("the Makefile's %s: %v", name, err)
	}
	return n
}

// durationSeconds is a Go duration's seconds.
func durationSeconds(t *testing.T, s string) float64 {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d.Seconds()
}

// TestDocsNumbers checks the figures the docs (and the benchmark report's
// prose) state against their source of truth (docNumberRows). Each
// sentence must still be there: a rewrite that drops it drops its row
// here too.
func TestDocsNumbers(t *testing.T) {
	root := moduleRoot(t)
	for _, tc := range docNumberRows(t, root) {
		checkSentence(t, root, tc.file, tc.re, len(tc.want), func(got string, i int) bool {
			n, _ := strconv.ParseFloat(strings.ReplaceAll(got, ",", ""), 64)
			return n == tc.want[i]
		}, func(i int) string { return strconv.FormatFloat(tc.want[i], 'g', -1, 64) })
	}
}

// checkSentence checks each match of re in the page file (one at least:
// a rewrite that drops the sentence drops its row too) against the
// wanted values: same says whether a match's group i+1 is the i-th of
// the n wanted, want prints it.
func checkSentence(t *testing.T, root, file, re string, n int, same func(got string, i int) bool, want func(i int) string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	ms := regexp.MustCompile(re).FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Errorf("%s no longer says %q: update the sentence or this test", file, re)
	}
	for _, m := range ms {
		for i := range n {
			if !same(m[i+1], i) {
				t.Errorf("%s says %q: %s where the source says %s", file, m[0], m[i+1], want(i))
			}
		}
	}
}

// figure matches a number with a unit of time, size or rate, a share in
// percent, or a count of things netdra or its tests have a number of.
var figure = regexp.MustCompile(`(?:^|[^\w.])(\d[\d,]*(?:\.\d+)?(?:-\d[\d.]*)?\s?(?:(?:ms|s|minutes?|hours?|MiB|GiB|KiB|GB|MB|bytes|Mbit/s|Gbit/s|` +
	`devices?|VFs?|PFs?|veths?|pods?|nodes?|characters|entries|times|attempts|lifecycles|addresses|blocks|cores|links|claims|slices|containers|processes)\b|%))`)

// masked is page with its code blocks and code spans blanked, every
// byte of them a space, so that an offset in it is one in page.
func masked(page string) string {
	lines := strings.Split(page, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") || fenced {
			if strings.HasPrefix(l, "```") {
				fenced = !fenced
			}
			lines[i] = strings.Repeat(" ", len(l))
			continue
		}
		lines[i] = codeSpan.ReplaceAllStringFunc(l, func(s string) string { return strings.Repeat(" ", len(s)) })
	}
	return strings.Join(lines, "\n")
}

// TestDocsNumbersAllChecked checks that every figure with a unit of time,
// size or rate, or a count of devices, pods and the like, in the docs' text (code blocks and code spans aside:
// commands and messages) is in a sentence of docNumberRows, so checked
// against its source; a measured figure is not quoted but pointed to in
// bench/RESULTS.md.
func TestDocsNumbersAllChecked(t *testing.T) {
	root := moduleRoot(t)
	rows := docNumberRows(t, root)
	res := map[string][]string{}
	for _, r := range rows {
		res[r.file] = append(res[r.file], r.re)
	}
	checked := checkCovered(t, root, res, figure, "a figure no row of docNumberRows checks; point to bench/RESULTS.md for a measured one, or add the row with its source")
	t.Logf("checked %d figures with a unit, %d sentences with figures", checked, len(rows))
}

// checkCovered fails t for each match of pattern's first group in the
// docs' text (code blocks and code spans masked) that no regexp of res,
// by page, covers (saying "page:line: match: " and why), and when pattern
// matches nothing at all; it returns how many matches were covered.
func checkCovered(t *testing.T, root string, res map[string][]string, pattern *regexp.Regexp, why string) int {
	t.Helper()
	covered := 0
	for _, d := range docs(t, root) {
		var spans [][]int
		for _, re := range res[d.rel] {
			spans = append(spans, regexp.MustCompile(re).FindAllStringIndex(d.text, -1)...)
		}
		text := masked(d.text)
		for _, m := range pattern.FindAllStringSubmatchIndex(text, -1) {
			at := m[2]
			if !slices.ContainsFunc(spans, func(c []int) bool { return c[0] <= at && at < c[1] }) {
				t.Errorf("%s:%d: %q: %s", d.rel, strings.Count(d.text[:at], "\n")+1, text[m[2]:m[3]], why)
				continue
			}
			covered++
		}
	}
	if covered == 0 {
		t.Fatalf("%s matched nothing in the docs: the pattern has drifted", pattern)
	}
	return covered
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
func schemaInt(t *testing.T, docs []any, prop, key string) float64 {
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
		return float64(n)
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
