package boundaries

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/netdra/netdra/"

// rules says, per service, which import path prefixes none of its packages
// may depend on, directly or not.
var rules = map[string][]string{
	"provisioner": {"k8s.io/client-go", "sigs.k8s.io/controller-runtime"},
	"state":       {"github.com/vishvananda/netlink", "github.com/cilium/ebpf", "k8s.io/client-go"},
	"nri":         {"github.com/vishvananda/netlink", "github.com/cilium/ebpf", "k8s.io/client-go"},
	"dra":         {"github.com/vishvananda/netlink", "github.com/cilium/ebpf"},
	"operator":    {"github.com/vishvananda/netlink", "github.com/cilium/ebpf"},
	// kubectl netdra, the person on call's tool, is no node process: it
	// runs with the user's kubeconfig, holds no node privilege, and reads
	// the cluster with client-go (a node's processes through exec in the
	// node pod). It may not reach the host itself.
	"cli": {"github.com/vishvananda/netlink", "github.com/cilium/ebpf", "sigs.k8s.io/controller-runtime"},
}

// testInfrastructure are the packages of this module that exist for tests:
// no service binary may link them (their tests may). shared/ keeps them
// apart under shared/testinfra; the provisioner's own fixtures sit beside
// the packages they serve, named *test.
var testInfrastructure = []string{
	module + "shared/testinfra",
	module + "shared/apis/agreement",
	module + "services/provisioner/netnstest", module + "services/provisioner/ebpf/ebpftest",
	module + "services/provisioner/link/linktest",
}

// owners says, per import path prefix, the only packages (path prefixes in
// this module) that may import it directly: eBPF is the provisioner's, and
// within it the ebpf package's (its tests and test helpers included).
var owners = map[string][]string{
	"github.com/cilium/ebpf": {module + "services/provisioner/ebpf"},
}

func TestImportOwners(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, imports := f[0], f[1:]
		for _, imp := range imports {
			for prefix, allowed := range owners {
				if imp != prefix && !strings.HasPrefix(imp, prefix+"/") {
					continue
				}
				found[prefix] = true
				ok := false
				for _, a := range allowed {
					ok = ok || pkg == a || strings.HasPrefix(pkg, a+"/")
				}
				if !ok {
					t.Errorf("%s imports %s; only %v may", pkg, imp, allowed)
				}
			}
		}
	}
	for prefix := range owners {
		if !found[prefix] {
			t.Errorf("no package imports %s: the rule checks nothing (or go list missed it)", prefix)
		}
	}
}

func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	services, err := os.ReadDir(filepath.Join(root, "services"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, svc := range services {
		if !svc.IsDir() {
			continue
		}
		name := svc.Name()
		t.Run(name, func(t *testing.T) {
			deps := goListDeps(t, root, "./services/"+name+"/...")
			forbidden := append([]string{}, rules[name]...)
			for _, other := range services {
				if other.IsDir() && other.Name() != name {
					forbidden = append(forbidden, module+"services/"+other.Name())
				}
			}
			for _, dep := range deps {
				for _, f := range forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("services/%s depends on %s", name, dep)
					}
				}
			}
			checked++
		})
	}
	if checked == 0 {
		t.Fatal("no service checked")
	}
}

// TestBinariesLinkNoTestInfrastructure: what a service binary links (its
// main package's dependencies; the test helpers under services/ are
// packages of their own that only tests import) holds none of the test
// infrastructure.
func TestBinariesLinkNoTestInfrastructure(t *testing.T) {
	root := moduleRoot(t)
	for _, name := range binaries(t, root) {
		for _, dep := range binaryDeps(t, root, name) {
			if isTestInfrastructure(dep) {
				t.Errorf("the %s binary links test infrastructure: %s", name, dep)
			}
		}
	}
}

// TestHookBinaryStartsFast: netdra-hook, which runc runs on containers'
// creation, links none of the packages whose init makes a Go program slow
// to start (gRPC, net/http, Prometheus, NRI, the protobuf runtime).
func TestHookBinaryStartsFast(t *testing.T) {
	slow := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "net/http", "github.com/prometheus",
		"github.com/containerd/nri", "k8s.io", "log/slog"}
	for _, dep := range binaryDeps(t, moduleRoot(t), "services/nri/cmd/netdra-hook") {
		for _, s := range slow {
			if dep == s || strings.HasPrefix(dep, s+"/") {
				t.Errorf("netdra-hook links %s", dep)
			}
		}
	}
}

// binaries are the main packages of the product's binaries, relative to
// root: each service's and the commands beside them (services/*/cmd/*).
func binaries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"services/*/main.go", "services/*/cmd/*/main.go"} {
		mains, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mains {
			rel, _ := filepath.Rel(root, filepath.Dir(m))
			out = append(out, rel)
		}
	}
	if len(out) == 0 {
		t.Fatal("no main packages under services/")
	}
	return out
}

// TestSharedIsProduct checks the other half of the layout: every package in
// shared/ outside shared/testinfra (and the test-only apis/agreement) is
// linked by some product binary, so test infrastructure cannot settle
// among the product's libraries unnoticed.
func TestSharedIsProduct(t *testing.T) {
	root := moduleRoot(t)
	linked := map[string]bool{}
	for _, name := range binaries(t, root) {
		for _, dep := range binaryDeps(t, root, name) {
			linked[dep] = true
		}
	}
	cmd := exec.Command("go", "list", "./shared/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./shared/...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if isTestInfrastructure(pkg) {
			continue
		}
		if !linked[pkg] {
			t.Errorf("%s is in shared/ but no service binary links it: product libraries only (test infrastructure goes under shared/testinfra)", pkg)
		}
	}
}

// TestSharedHasTwoUsers checks that a package earns its place in shared/:
// at least two of the module's packages import it (their non-test
// files); a package with one user lives beside it.
func TestSharedHasTwoUsers(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	users := map[string][]string{}
	var shared []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if strings.HasPrefix(f[0], module+"shared/") && !isTestInfrastructure(f[0]) {
			shared = append(shared, f[0])
		}
		if isTestInfrastructure(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			users[imp] = append(users[imp], f[0])
		}
	}
	if len(shared) == 0 {
		t.Fatal("go list found no shared/ package")
	}
	for _, pkg := range shared {
		if n := len(users[pkg]); n < 2 {
			t.Errorf("%s has %d user(s) %v: a shared package has two or more, else it moves beside its user", pkg, n, users[pkg])
		}
	}
}

func isTestInfrastructure(pkg string) bool {
	for _, f := range testInfrastructure {
		if pkg == f || strings.HasPrefix(pkg, f+"/") {
			return true
		}
	}
	return false
}

// TestImportRules_Detects makes sure the check sees through to transitive
// dependencies: the rpc plumbing depends on grpc.
func TestImportRules_Detects(t *testing.T) {
	deps := goListDeps(t, moduleRoot(t), "./shared/rpc")
	for _, d := range deps {
		if d == "google.golang.org/grpc/internal/transport" {
			return
		}
	}
	t.Fatalf("go list -deps missed a transitive dependency: %q", deps)
}

func goListDeps(t *testing.T, root, pattern string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", pattern)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	return strings.Fields(string(out))
}

// binaryDeps lists what the binary of the main package at pkg (relative
// to root) links: no -test.
func binaryDeps(t *testing.T, root, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./%s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestTestFileNames checks that where a test runs is readable from its file
// name, in the product module: a file of kernel-rig tests (built only
// with the kernelrig tag, run in QEMU by `make test-kernel`) is named
// *_kernel_test.go, and only those; a file that needs root on the host
// (testenv.RequireRoot, throwaway namespaces from netnstest; `//go:build
// !kernelrig` ones too) is named *_netns_test.go. The real
// node's tests live in the test world's own packages (shared/testinfra/testworld).
func TestTestFileNames(t *testing.T) {
	root := moduleRoot(t)
	needsRoot := regexp.MustCompile(`testenv\.RequireRoot\(|netnstest\.New\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".tools", "_output", "shared/testinfra/testworld", "pods/images":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		kernel, netns := strings.HasSuffix(path, "_kernel_test.go"), strings.HasSuffix(path, "_netns_test.go")
		switch tagged := kernelOnly(src); {
		case tagged && !kernel:
			t.Errorf("%s has the kernelrig build tag: name it *_kernel_test.go", rel)
		case kernel && !tagged:
			t.Errorf("%s is named *_kernel_test.go without the kernelrig build tag", rel)
		case !tagged && needsRoot.Match(src) && !netns:
			t.Errorf("%s needs root on the host: name it *_netns_test.go", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kernelOnly reports whether src's build constraint holds with the
// kernelrig tag and not without it.
func kernelOnly(src []byte) bool {
	for _, line := range strings.Split(string(src), "\n") {
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			return false
		}
		with := expr.Eval(func(tag string) bool { return tag == "kernelrig" })
		without := expr.Eval(func(string) bool { return false })
		return with && !without
	}
	return false
}

// TestNoBinariesCommitted checks that no file git tracks is an executable
// or object a build leaves behind (an ELF file), but the eBPF objects
// bpf2go generates (*_bpfel.o, *_bpfeb.o), which make generate rebuilds
// and make checkgenerate compares: a stray `go build` in a main package's
// folder writes its binary there, and git add -A would commit megabytes.
func TestNoBinariesCommitted(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if strings.HasSuffix(f, "_bpfel.o") || strings.HasSuffix(f, "_bpfeb.o") {
			continue
		}
		fh, err := os.Open(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree, not yet in the index
		}
		magic := make([]byte, 4)
		n, _ := fh.Read(magic)
		fh.Close()
		if n == 4 && string(magic) == "\x7fELF" {
			t.Errorf("%s is an ELF file a build left: remove it (git rm --cached) and list it in .gitignore", f)
		}
	}
}

// TestFlagHelpIsShort checks that every flag's help text in the product
// code, services/ and shared/ (the last string argument of a flag set's String, StringVar, Duration,
// ... call) is at most 200 characters: a help text says what the flag
// sets and its empty or default meaning; the why belongs in docs/.
func TestFlagHelpIsShort(t *testing.T) {
	const max = 200
	define := regexp.MustCompile(`^(Bool|Int|Int64|Uint|Uint64|Float64|String|Duration|Func|Text)(Var)?$`)
	root := moduleRoot(t)
	fset := token.NewFileSet()
	walk := func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && path == filepath.Join(root, "shared", "testinfra") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 3 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !define.MatchString(sel.Sel.Name) {
				return true
			}
			name, ok1 := call.Args[len(call.Args)-3].(*ast.BasicLit)
			help, ok2 := call.Args[len(call.Args)-1].(*ast.BasicLit)
			if !ok1 || !ok2 || help.Kind != token.STRING || name.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(help.Value); err == nil && len(s) > max {
				t.Errorf("%s: flag %s's help is %d characters, over %d", fset.Position(help.Pos()), name.Value, len(s), max)
			}
			return true
		})
		return nil
	}
	for _, dir := range []string{"services", "shared"} {
		if err := filepath.WalkDir(filepath.Join(root, dir), walk); err != nil {
			t.Fatal(err)
		}
	}
}
