package controlplane_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestStartStop starts a control plane, checks that it answers as v1.37.2
// with the DRA API and the default ServiceAccount, then stops it and checks
// that the process is gone and its apiserver port free.
func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Logger: worldtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	t.Logf("ready in %s, child RSS %d MiB", cp.StartedIn().Round(time.Millisecond), rssMiB(cp.PID()))

	v, err := cp.Client().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" {
		t.Errorf("server version %q, want v1.37.2", v.GitVersion)
	}
	if _, err := cp.Client().ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("resource.k8s.io/v1 not served: %v", err)
	}
	if _, err := os.Stat(cp.Kubeconfig()); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	// The controller-manager runs: it creates every namespace's ServiceAccount.
	worldtest.Namespace(t, cp.Client())

	u, err := url.Parse(cp.Server())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := syscall.Kill(cp.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("control plane process %d still there after Stop (kill 0: %v)", cp.PID(), err)
	}
	l, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Errorf("apiserver port not free after Stop: %v", err)
	} else {
		l.Close()
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func rssMiB(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}
