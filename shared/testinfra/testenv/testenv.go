// Package testenv says what a test needs from the machine it runs on. A
// test that needs root calls RequireRoot: it skips, saying why, when not
// run as root, except under CI (StrictEnv=1, which .ci/run sets), where a
// skip would hide a test that never ran and so fails instead. It imports
// nothing of netdra, so that any package's tests can use it.
package testenv

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// StrictEnv names the environment variable that turns a missing
// requirement from a skip into a failure ("1"): set by .ci/run.
const StrictEnv = "NETDRA_TEST_STRICT"

// Strict reports whether a missing requirement fails the test.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// RequireRoot skips the test (fails it when Strict) unless it runs as
// root; why says what the test does that needs root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if Strict() {
		t.Fatalf("needs root (%s), and %s=1 forbids skipping: run the tests as root", why, StrictEnv)
	}
	t.Skipf("needs root: %s", why)
}

// FreeAddr returns a loopback TCP address ("127.0.0.1:port") whose port
// nothing listens on now, for a process the test starts to listen on; the
// port is PortOn's.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := PortOn()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// FreePort is PortOn's port on 127.0.0.1, failing the test when there is
// none.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := PortOn()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
