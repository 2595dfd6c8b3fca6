package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// TestAllocated: what the sweep counts as free, step by step: nothing
// before a list; then what the last list does not name, unless this
// process prepared it since; and what this process freed, whatever the
// list says.
func TestAllocated(t *testing.T) {
	var a allocated
	check := func(step string, want map[string]bool) {
		t.Helper()
		for slot, free := range want {
			if got := a.free(slot); got != free {
				t.Errorf("%s: free(%s) = %t, want %t", step, slot, got, free)
			}
		}
	}
	check("no list", map[string]bool{"eth1": false, "eth2": false})
	if !a.list([]string{"eth1", "eth3"}) {
		t.Error("the first list is not reported first")
	}
	check("listed", map[string]bool{"eth1": false, "eth2": true, "eth3": false, "eth3_0f3a": false})
	a.prepared("eth2")
	a.freed("eth3")
	check("set up and freed here", map[string]bool{"eth2": false, "eth3": true})
	if a.list([]string{"eth3"}) {
		t.Error("a later list is reported first")
	}
	check("listed again", map[string]bool{"eth1": true, "eth2": false, "eth3": true})
}

// TestConfigure_PreparedDevices: a list with a name that is no device
// name is InvalidArgument naming the element.
func TestConfigure_PreparedDevices(t *testing.T) {
	h := newHarness(t)
	_, err := h.client.Configure(ctxFor(t), &provisionerv1.ConfigureRequest{
		PreparedDevices: &provisionerv1.PreparedDevices{Devices: []string{"eth1", "Eth_2"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "preparedDevices.devices[1]:") {
		t.Errorf("error %v, want InvalidArgument for preparedDevices.devices[1]", err)
	}
}
