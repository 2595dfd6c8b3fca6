package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestPortOn_BelowEphemeralAndFree checks that PortOn's port lies below the
// kernel's ephemeral range and can be bound at every address asked for, and
// that a port held by a listener is never chosen.
func TestPortOn_BelowEphemeralAndFree(t *testing.T) {
	top := ephemeralLow()
	if top-lowestPort < 1000 {
		t.Skipf("ephemeral range starts at %d: PortOn falls back to the kernel's choice", top)
	}
	for range 50 {
		p, err := PortOn("127.0.0.1", "127.0.0.2")
		if err != nil {
			t.Fatal(err)
		}
		if p < lowestPort || p >= top {
			t.Fatalf("port %d outside [%d, %d)", p, lowestPort, top)
		}
		for _, h := range []string{"127.0.0.1", "127.0.0.2"} {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("PortOn's port %d cannot be bound at %s: %v", p, h, err)
			}
			l.Close()
		}
	}
	p, err := PortOn()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(p, []string{"127.0.0.1"}) {
		t.Errorf("free(%d) with a listener on it = true", p)
	}
}
