package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const grpcurlModule = "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"

// grpcurl returns the grpcurl binary: $GRPCURL (the Makefile's pinned copy)
// or one this test installs from the module proxy into the user cache.
func grpcurl(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GRPCURL"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "netdra", "tools")
	cmd := exec.Command("go", "install", grpcurlModule)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("installing %s: %v\n%s", grpcurlModule, err, out)
	}
	return filepath.Join(bin, "grpcurl")
}

func runGrpcurl(t *testing.T, bin, sock string, args ...string) string {
	t.Helper()
	args = append([]string{"-plaintext", "-unix"}, args...)
	// The address comes after the flags and before the method.
	for i, a := range args {
		if a == "SOCK" {
			args[i] = sock
		}
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestGrpcurl is what a person does by hand: list the services of a running
// state service, check its health, write an allocation, kill -9 the service,
// start it again and find the allocation still there.
func TestGrpcurl(t *testing.T) {
	bin := grpcurl(t)
	sock, db := newDirs(t)
	p := startState(t, sock, db)

	services := strings.Fields(runGrpcurl(t, bin, sock, "SOCK", "list"))
	for _, want := range []string{"netdra.state.v1.StateService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("grpcurl list: %q lacks %s", services, want)
		}
	}
	if out := runGrpcurl(t, bin, sock, "SOCK", "grpc.health.v1.Health/Check"); !strings.Contains(out, `"SERVING"`) {
		t.Errorf("health: %s", out)
	}
	if out := runGrpcurl(t, bin, sock, "SOCK", "describe", "netdra.state.v1.StateService"); !strings.Contains(out, "rpc BeginPrepare") {
		t.Errorf("describe: %s", out)
	}
	runGrpcurl(t, bin, sock, "-d", `{"allocations":[{"pool":"p","deviceName":"dummy0","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c1","podUid":"p1","config":{"podIfName":"net1"}}]}`,
		"SOCK", "netdra.state.v1.StateService/BeginPrepare")

	p.kill()
	p = startState(t, sock, db)
	var dump struct {
		Allocations []struct {
			Pool, DeviceName, ClaimUID, Phase string
			Config                            struct{ PodIfName string }
		}
	}
	out := runGrpcurl(t, bin, sock, "SOCK", "netdra.state.v1.StateService/Dump")
	if err := json.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatalf("dump is not JSON: %v\n%s", err, out)
	}
	if len(dump.Allocations) != 1 || dump.Allocations[0].DeviceName != "dummy0" ||
		dump.Allocations[0].Phase != "PHASE_PREPARING" || dump.Allocations[0].Config.PodIfName != "net1" {
		t.Errorf("after kill -9 and restart the dump is %s", out)
	}
	p.stop()
}
