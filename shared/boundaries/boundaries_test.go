package boundaries

import (
	"os"
	"os/exec"
	"path/filepath"
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

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
