package boundaries

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
