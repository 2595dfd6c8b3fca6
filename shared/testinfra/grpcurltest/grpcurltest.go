// Package grpcurltest runs grpcurl against a process's socket in tests, the
// way a person looks at a running netdra process by hand.
package grpcurltest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/toolsmod"
)

// Package is grpcurl's main package, pinned by shared/tools/go.mod.
const Package = "github.com/fullstorydev/grpcurl/cmd/grpcurl"

// Binary returns the grpcurl binary: $GRPCURL (the Makefile's pinned copy)
// or one built from the tools module into the user cache.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("GRPCURL"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	bin, err := toolsmod.Build(Package, "")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Call runs `grpcurl -plaintext -unix [-d data] sock args...` and returns
// its output; it fails the test when grpcurl fails.
func Call(t testing.TB, bin, sock, data string, args ...string) string {
	t.Helper()
	out, err := Try(bin, sock, data, args...)
	if err != nil {
		t.Fatalf("grpcurl %s %s: %v\n%s", sock, strings.Join(args, " "), err, out)
	}
	return out
}

// Try is Call that returns grpcurl's error (its output holds the status).
func Try(bin, sock, data string, args ...string) (string, error) {
	full := []string{"-plaintext", "-unix"}
	if data != "" {
		full = append(full, "-d", data)
	}
	full = append(full, sock)
	full = append(full, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	return string(out), err
}

// Stream reads a server stream for maxTime and returns what arrived by
// then; grpcurl reports the deadline it hit as an error, which is expected.
func Stream(bin, sock, data string, maxTime time.Duration, method string) string {
	full := []string{"-plaintext", "-unix", "-max-time", strconv.FormatFloat(maxTime.Seconds(), 'f', -1, 64)}
	if data != "" {
		full = append(full, "-d", data)
	}
	out, _ := exec.Command(bin, append(full, sock, method)...).CombinedOutput()
	return string(out)
}
