package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// BenchmarkHook_ExecToExit measures what runc pays for netdra on a
// container's creation: the OCI createRuntime hook, netdra-hook
// check-netns -socket, exec'd with the OCI state on its stdin as runc
// runs it, from its exec to its exit, against an empty Go program built
// as the hook is (static, -trimpath, stripped) and exec'd the same way,
// one after the other in each turn. The hook asks a real gate server
// (gatehook.Server behind rpc.Listen and its peer check, as nri serves
// it) that answers at once, and checks lo in this process's netns: the
// hook's own cost, not the attach's. It reports the P50 of each and the
// hook's P50 over the empty program's.
func BenchmarkHook_ExecToExit(b *testing.B) {
	empty := emptyProgram(b)
	hook := nodetest.Hook(b)
	sock := filepath.Join(nodetest.Dir(b), "gate.sock")
	ln, err := rpc.Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = gatehook.Server{Wait: func(context.Context, gatehook.Request) error { return nil }, Admit: rpc.AdmitUIDs(sock, nil)}.Serve(ctx, ln)
		close(done)
	}()
	b.Cleanup(func() { cancel(); <-done })
	state := `{"ociVersion":"1.2.0","id":"bench","status":"creating","pid":` + strconv.Itoa(os.Getpid()) +
		`,"annotations":{"io.kubernetes.cri.sandbox-uid":"bench-pod"}}`
	argv := []string{hook, "check-netns", "-socket", sock, "-ifname", "lo"}
	var emptyT, hookT []time.Duration
	for b.Loop() {
		emptyT = append(emptyT, execToExit(b, state, empty))
		hookT = append(hookT, execToExit(b, state, argv...))
	}
	e, h := p50(emptyT), p50(hookT)
	b.ReportMetric(float64(e.Microseconds())/1000, "empty-p50-ms")
	b.ReportMetric(float64(h.Microseconds())/1000, "hook-p50-ms")
	b.ReportMetric(float64(h)/float64(e), "hook/empty")
}

// emptyProgram builds `func main() {}` as nodetest builds netdra's
// binaries, and returns its path.
func emptyProgram(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module empty\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "empty", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the empty program: %v\n%s", err, out)
	}
	return filepath.Join(dir, "empty")
}

// execToExit runs argv with stdin, as runc runs a hook (its output
// collected), and returns the time from its start to its exit.
func execToExit(b *testing.B, stdin string, argv ...string) time.Duration {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("%q: %v\n%s", argv, err, out)
	}
	return d
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
