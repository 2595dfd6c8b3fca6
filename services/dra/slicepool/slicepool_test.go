package slicepool

import (
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	s := SlicePool("node-a", "net")
	if s != "node-a/net" {
		t.Fatalf("SlicePool = %q", s)
	}
	if p, ok := PoolOf("node-a", s); !ok || p != "net" {
		t.Fatalf("PoolOf = %q, %v", p, ok)
	}
}

func TestPoolOfRefusesOthers(t *testing.T) {
	for _, s := range []string{"net", "node-b/net", "node-a/", "node-a/x/y", "node-ab/net", "node/net"} {
		if p, ok := PoolOf("node-a", s); ok {
			t.Errorf("PoolOf(node-a, %q) = %q, true; want refused", s, p)
		}
		if _, err := Of("node-a", s); err == nil {
			t.Errorf("Of(node-a, %q): no error", s)
		}
	}
}

func TestCheck(t *testing.T) {
	node := strings.Repeat("n", 200)
	if err := Check(node, strings.Repeat("p", 52)); err != nil {
		t.Errorf("253 characters refused: %v", err)
	}
	if err := Check(node, strings.Repeat("p", 53)); err == nil {
		t.Error("254 characters accepted")
	}
}
