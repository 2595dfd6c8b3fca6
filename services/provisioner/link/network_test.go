package link

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestParseRules_Index: each kernel rule carries the index of the claim's
// rule it was made of, a rule without from or to being one per family, so
// that the kernel's refusal names the claim's rules[N].
func TestParseRules_Index(t *testing.T) {
	rules := parseRules([]*devicev1.Rule{
		{Priority: 100, From: "192.0.2.0/24", Table: 100},
		{Priority: 101, Table: 100},
		{Priority: 102, To: "2001:db8:7::/48", Table: 100},
	})
	type got struct{ Index, Family, Priority int }
	var gots []got
	for _, r := range rules {
		gots = append(gots, got{r.index, r.rule.Family, r.rule.Priority})
	}
	want := []got{{0, unix.AF_INET, 100}, {1, unix.AF_INET, 101}, {1, unix.AF_INET6, 101}, {2, unix.AF_INET6, 102}}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// TestParseNeighbors_Index: each neighbour carries its index in the
// claim's neighbors.
func TestParseNeighbors_Index(t *testing.T) {
	ns := parseNeighbors([]*devicev1.Neighbor{{Address: "192.0.2.1", Mac: "02:00:00:00:00:99"}, {Address: "2001:db8::1", Mac: "02:00:00:00:00:98"}})
	if len(ns) != 2 || ns[0].index != 0 || ns[1].index != 1 || ns[1].neigh.Family != unix.AF_INET6 {
		t.Errorf("neighbours = %+v, want indexes 0 and 1, the second IPv6", ns)
	}
}
