package rpc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// TestHelperProcess is not a test: TestPeerCredentialsOtherUser runs the
// test binary as another user to call a server from that user.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperSocketEnv)
	if path == "" {
		t.Skip("helper process for TestPeerCredentialsOtherUser")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := CheckHealth(ctx, path, "")
	fmt.Printf("uid=%d code=%s err=%v\n", os.Getuid(), status.Code(err), err)
	os.Exit(0)
}

func TestPeerCredentialsOtherUser(t *testing.T) {
	testenv.RequireRoot(t, "runs a client as uid 65534")
	path := socketPath(t)
	dir := filepath.Dir(path)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary may sit in a build dir only root can enter.
	bin := filepath.Join(dir, "rpc.test")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}

	startServer(t, ServerConfig{SocketPath: path})
	// With mode 0660 connect() itself would fail with EACCES; open the
	// socket up so that it is the SO_PEERCRED check that rejects.
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(testCtx(t), bin, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperSocketEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	t.Logf("helper: %s", out)
	for _, want := range []string{
		"uid=65534 ",
		"code=PermissionDenied ",
		fmt.Sprintf("peer uid 65534 is not allowed on %s", path),
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper output lacks %q", want)
		}
	}
}
