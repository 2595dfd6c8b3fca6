package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// BinaryEnv names the environment variable that points at a prebuilt
// testworld binary (make world builds one).
const BinaryEnv = "TESTWORLD_BIN"

// LDFlags are the linker flags the testworld binary needs: the Kubernetes
// components refuse to start with the version of an untagged build.
const LDFlags = "-X k8s.io/component-base/version.gitVersion=v1.37.2" +
	" -X k8s.io/component-base/version.gitMajor=1" +
	" -X k8s.io/component-base/version.gitMinor=37" +
	" -X k8s.io/component-base/version.gitTreeState=clean"

// modulePath is the import path of the module holding cmd/testworld.
const modulePath = "github.com/netdra/netdra/shared/testinfra/testworld"

// Binary returns the testworld binary: $TESTWORLD_BIN when set, else one
// built from this module's source with `go install` into
// <user cache dir>/netdra-testworld/bin. go install relinks only when the
// source changed, so after the first build (minutes: it compiles
// k8s.io/kubernetes) this takes a second or two. Concurrent callers, in
// this process or others, are serialized by a file lock.
func Binary(ctx context.Context, logger *slog.Logger) (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", BinaryEnv, err)
		}
		return bin, nil
	}
	src, err := ModuleDir()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache dir for the testworld binary: %w", err)
	}
	gobin := filepath.Join(cache, "netdra-testworld", "bin")
	if err := os.MkdirAll(gobin, 0o755); err != nil {
		return "", fmt.Errorf("cache dir for the testworld binary: %w", err)
	}
	unlock, err := LockFile(filepath.Join(gobin, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	t0 := time.Now()
	logger.Info("building the testworld binary (the first build compiles Kubernetes: minutes)", "gobin", gobin)
	cmd := exec.CommandContext(ctx, "go", "install", "-ldflags="+LDFlags, "./cmd/testworld")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install ./cmd/testworld in %s: %w: %s", src, err, out.String())
	}
	logger.Info("testworld binary ready", "took", time.Since(t0).Round(time.Millisecond))
	return filepath.Join(gobin, "testworld"), nil
}

// SourceEnv names the environment variable that points at the test
// world module's source folder, for a -trimpath build run from outside it.
const SourceEnv = "TESTWORLD_SRC"

// ModuleDir finds the test world module's source folder: $TESTWORLD_SRC
// when set; else the path compiled into this file (a build without
// -trimpath); else the first folder up from the working directory that is
// the module or a checkout holding it at shared/testinfra/testworld (make
// builds everything with -trimpath, from the repository or the module).
func ModuleDir() (string, error) {
	if dir := os.Getenv(SourceEnv); dir != "" {
		if !isModule(dir) {
			return "", fmt.Errorf("%s=%s: no go.mod of %s there", SourceEnv, dir, modulePath)
		}
		return dir, nil
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if dir := filepath.Dir(filepath.Dir(file)); isModule(dir) {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		for _, d := range []string{dir, filepath.Join(dir, "shared", "testinfra", "testworld")} {
			if isModule(d) {
				return d, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("source of %s not found from %s up: set %s to its folder, or %s to a testworld binary (make world)", modulePath, wd, SourceEnv, BinaryEnv)
		}
	}
}

// isModule reports whether dir holds the test world module's go.mod.
func isModule(dir string) bool {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.HasPrefix(string(mod), "module "+modulePath+"\n")
}

// LockFile takes an exclusive flock on path (created if missing) and
// returns its release: builds of the test world's binaries into one cache,
// from this process or others, take turns.
func LockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock: %w", err)
	}
	return func() { f.Close() }, nil
}
