package boundaries

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/netdra/netdra/services/dra/cdispec"
)

// codeText is what a page shows as code: its code spans and the lines of
// its fenced blocks, each with its line number.
func codeText(page string) []struct {
	line int
	text string
} {
	var out []struct {
		line int
		text string
	}
	fenced := false
	for i, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out = append(out, struct {
				line int
				text string
			}{i + 1, l})
			continue
		}
		for _, s := range codeSpan.FindAllString(l, -1) {
			out = append(out, struct {
				line int
				text string
			}{i + 1, strings.Trim(s, "`")})
		}
	}
	return out
}

// makefile is the Makefile's targets and the variables it sets with a
// default (VAR ?= value, VAR := value) or reads ($(VAR)).
type makefile struct {
	targets  map[string]bool
	vars     map[string]bool
	defaults map[string]string // VAR ?= value
}

func readMakefile(t *testing.T, root string) makefile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := makefile{targets: map[string]bool{}, vars: map[string]bool{}, defaults: map[string]string{}}
	target := regexp.MustCompile(`^([a-z][a-z0-9 -]*):([^=]|$)`)
	assign := regexp.MustCompile(`^([A-Z][A-Z0-9_]*)\s*(\?|:|\+)?=\s*(.*)$`)
	ref := regexp.MustCompile(`\$[({]([A-Z][A-Z0-9_]*)[)}]`)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if g := target.FindStringSubmatch(l); g != nil {
			for _, name := range strings.Fields(g[1]) {
				m.targets[name] = true
			}
		}
		if g := assign.FindStringSubmatch(l); g != nil {
			m.vars[g[1]] = true
			if g[2] == "?" {
				m.defaults[g[1]] = strings.TrimSpace(g[3])
			}
		}
		for _, g := range ref.FindAllStringSubmatch(l, -1) {
			m.vars[g[1]] = true
		}
	}
	if !m.targets["test"] || !m.vars["FUZZTIME"] {
		t.Fatalf("read no targets or variables from the Makefile (%d, %d): its form has changed", len(m.targets), len(m.vars))
	}
	return m
}

// TestDocsMakeTargets checks every make command the documentation shows
// (`make TARGET... VAR=value...` in a code span or a code block) against
// the Makefile: each target is one of its rules and each variable one it
// sets or reads.
func TestDocsMakeTargets(t *testing.T) {
	root := moduleRoot(t)
	mk := readMakefile(t, root)
	cmd := regexp.MustCompile(`(?:^|[;&|(]\s*|\s)make((?:\s+[A-Za-z0-9_.-]+(?:=(?:"[^"]*"|\S*))?)+)`)
	checked := 0
	for _, d := range docs(t, root) {
		for _, c := range codeText(d.text) {
			text, _, _ := strings.Cut(c.text, "#")
			for _, m := range cmd.FindAllStringSubmatch(" "+text, -1) {
				for _, w := range regexp.MustCompile(`[A-Za-z0-9_.-]+(=(?:"[^"]*"|\S*))?`).FindAllString(m[1], -1) {
					checked++
					if name, _, ok := strings.Cut(w, "="); ok {
						if !mk.vars[name] {
							t.Errorf("%s:%d: `make ... %s`: the Makefile has no variable %s", d.rel, c.line, w, name)
						}
						continue
					}
					if strings.HasPrefix(w, "-") || strings.ContainsAny(w, "./") {
						continue // make's own flags, a file argument
					}
					if !mk.targets[w] {
						t.Errorf("%s:%d: `make %s`: the Makefile has no target %s", d.rel, c.line, w, w)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no make command in the documentation: the pattern has drifted")
	}
	t.Logf("checked %d make targets and variables", checked)
}

// capsName matches a name in capitals with an underscore (an environment
// or make variable, a proto enum value, a kernel constant), or one in
// capitals set on a command line (CTR=...).
var capsName = regexp.MustCompile(`\b([A-Z][A-Z0-9]*_[A-Z0-9_]*|[A-Z]{2,}[A-Z0-9]*=)`)

// outsideNames are names in capitals the documentation gives that belong
// to Linux, Kubernetes or another project, each with whose it is; a name
// with one of outsidePrefixes is the kernel's.
var (
	outsideNames = map[string]string{
		"PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE": "the SR-IOV device plugin's variable",
		"SRIOVNETWORK_PCI_ADDRESSES":                "the SR-IOV DRA driver's variable",
		"NODE_IP":                                   "a placeholder the reader sets",
		"UID_":                                      "a shell variable of the example",
		"PCIDEVICE_":                                "the device plugins' prefix, as the text says",
	}
	outsidePrefixes = []string{"CAP_", "CONFIG_", "IFLA_", "RTM_", "SO_", "SCM_", "VFIO_", "RDMA_", "NET_", "SYS_"}
)

// goLiterals is every string constant of the Go files under dirs: the
// names the code itself uses.
func goLiterals(t *testing.T, root string, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (e.Name() == "testdata" || e.Name() == ".tools" || e.Name() == "_output") {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(p, ".go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestDocsNamesInCapitals checks every name in capitals the documentation
// gives (an environment or make variable, an enum value): it is a variable
// the Makefile sets or reads, a string the Go code uses (the name an
// environment variable is read by, a proto enum value's name), a value
// services/dra/cdispec derives (PCIDEVICE_NETDRA_IO_<REQUEST>), or a name
// of the kernel or another project, listed with whose it is.
func TestDocsNamesInCapitals(t *testing.T) {
	root := moduleRoot(t)
	mk := readMakefile(t, root)
	lits := goLiterals(t, root, "services", "shared", "bench", "pods", "protos")
	derived := map[string]bool{cdispec.EnvName("net"): true, strings.TrimSuffix(cdispec.EnvName("x"), "X"): true}
	known := func(name string) bool {
		if mk.vars[name] || lits[name] || derived[name] || outsideNames[name] != "" {
			return true
		}
		for _, p := range outsidePrefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, d := range docs(t, root) {
		for i, line := range strings.Split(d.text, "\n") {
			for _, m := range capsName.FindAllStringSubmatch(line, -1) {
				name := strings.TrimSuffix(m[1], "=")
				checked++
				if !known(name) {
					t.Errorf("%s:%d: %s is no variable of the Makefile, no name the code uses and no outside name this test lists", d.rel, i+1, name)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no name in capitals in the documentation: the pattern has drifted")
	}
	t.Logf("checked %d names in capitals", checked)
}

// hostPath matches an absolute path of a host or container (not of the
// repository) in a page.
var hostPath = regexp.MustCompile(`(?:^|[\s` + "`" + `(=])(/(?:var|run|opt|usr|dev|tmp|sys|proc|etc|lib)(?:/[A-Za-z0-9_.~-]+)*)`)

// outsidePaths are host paths the docs name that are no setting of
// netdra's, each with whose it is.
var outsidePaths = map[string]string{
	"/etc/passwd":                      "the image's user database",
	"/var/lib/netdra/state.db.corrupt": "where the troubleshooting example moves a corrupt state file",
	"/etc/group":                       "the image's group database",
	"/var/lib/k0s/kubelet":             "k0s's kubelet root, the install example's",
	"/dev/vfio/42":                     "an example VFIO group",
	"/dev/shm":                         "the host's tmpfs",
	"/var/run/netns":                   "iproute2's netns folder",
	"/var/lib/cni":                     "libcni's state",
	"/var/log/containers":              "the kubelet's log links",
	"/run/containerd":                  "containerd's state",
	"/run/netdra-sockets":              "the link the on-call example makes",
	"/var/cache/netdra":                "the kernel rig's cache (shared/testinfra/kernelrig)",
}

// TestDocsNameHostPaths checks every host or container path the docs
// name (the state file, the sockets, the hook binary, the kubelet's and
// the runtime's folders) against the code and the manifests: it is, or
// is a folder of, a path a Go string constant, values.yaml, the chart's
// templates, pods/base, the Makefile or the image builder gives, or an
// outside path listed with whose it is; or a file the code names in a
// folder it gives (the dev folder's sockets). A placeholder (<uid>) ends
// the part checked.
func TestDocsNameHostPaths(t *testing.T) {
	root := moduleRoot(t)
	var known []string
	for s := range goLiterals(t, root, "services", "shared", "pods", "bench") {
		known = append(known, s)
	}
	for _, dir := range []string{"pods/chart/netdra", "pods/base", "pods/images"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || strings.HasSuffix(p, ".go") {
				return err
			}
			b, err := os.ReadFile(p)
			known = append(known, string(b))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"Makefile", "pods/Dockerfile"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err == nil {
			known = append(known, string(b))
		}
	}
	hasPath := func(p string) bool {
		for prefix := range outsidePaths {
			if p == prefix || strings.HasPrefix(p, prefix+"/") {
				return true
			}
		}
		for _, k := range known {
			for i := strings.Index(k, p); i >= 0; {
				end := i + len(p)
				if (i == 0 || !isPathByte(k[i-1])) && (end == len(k) || !isPathByte(k[end]) || k[end] == '/') {
					return true
				}
				j := strings.Index(k[i+1:], p)
				if j < 0 {
					break
				}
				i += 1 + j
			}
		}
		return false
	}
	checked := 0
	for _, d := range docs(t, root) {
		for i, line := range strings.Split(d.text, "\n") {
			for _, m := range hostPath.FindAllStringSubmatch(line, -1) {
				p := strings.TrimRight(m[1], ".,:;/")
				if p == "" || strings.Count(p, "/") < 2 {
					continue // a top folder alone: /var, /dev
				}
				checked++
				dir, base := path.Split(p)
				if !hasPath(p) && !(hasPath(strings.TrimSuffix(dir, "/")) && slices.ContainsFunc(known, func(k string) bool { return strings.Contains(k, base) })) {
					t.Errorf("%s:%d: %s is no path the code, the chart, pods/base or the Makefile gives, nor a listed outside one", d.rel, i+1, p)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no host path in the docs: the pattern has drifted")
	}
	t.Logf("checked %d host paths", checked)
}

// isPathByte says whether b may be part of a path's name.
func isPathByte(b byte) bool {
	return b == '_' || b == '-' || b == '.' || b == '~' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
