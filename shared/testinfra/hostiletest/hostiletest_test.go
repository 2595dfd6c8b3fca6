package hostiletest

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func TestCases(t *testing.T) {
	md := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService").Methods().ByName("MarkFreeFailed")
	base := &statev1.MarkFreeFailedRequest{Key: &statev1.AllocationKey{Pool: "p", DeviceName: "d"}, Error: "boom"}
	var names []string
	for _, c := range Cases(md, base) {
		names = append(names, c.Name)
		if c.Path != "" && Resolve(c.Req, c.Path) != "" {
			t.Errorf("%s: its path %q does not resolve: %s", c.Name, c.Path, Resolve(c.Req, c.Path))
		}
	}
	want := []string{"zero request", "base 0: key: cleared", "base 0: key.pool: 1 MiB", "base 0: key.deviceName: 1 MiB", "base 0: key.shareId: 1 MiB", "base 0: error: 1 MiB"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("cases (-want +got):\n%s", diff)
	}
	if !proto.Equal(base, &statev1.MarkFreeFailedRequest{Key: &statev1.AllocationKey{Pool: "p", DeviceName: "d"}, Error: "boom"}) {
		t.Errorf("Cases changed the base: %v", base)
	}
}

// TestCases_Kinds: every kind of abuse is made, where the base has the
// field and where it lacks it (scoped to the message made for it).
func TestCases_Kinds(t *testing.T) {
	md := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService").Methods().ByName("BeginPrepare")
	base := &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{{Pool: "p", DeviceName: "d", Config: &devicev1.DeviceConfig{Addresses: []string{"10.0.0.1/24"}}}}}
	byName := map[string]Case{}
	for _, c := range Cases(md, base) {
		byName[strings.TrimPrefix(c.Name, "base 0: ")] = c
	}
	for _, tc := range []struct{ name, scope string }{
		{"allocations: 10000 copies", "allocations"},
		{"allocations[0].pool: 1 MiB", "allocations[0].pool"},
		{"allocations[0].manager: enum 999", "allocations[0].manager"},
		{"allocations[0].attempts: max uint32", "allocations[0].attempts"},
		{"allocations[0].config.addresses: 10000 different", "allocations[0].config.addresses"},
		{"allocations[0].config.addresses[0]: 1 MiB", "allocations[0].config.addresses[0]"},
		{"allocations[0].config: cleared", "allocations[0].config"},
		{"allocations[0].preparedDevice: empty", "allocations[0].preparedDevice"},
		{"allocations[0].preparedDevice.device.attributes: 10000 entries", "allocations[0].preparedDevice"},
		{"allocations[0].config.routes[0].gateway: 1 MiB", "allocations[0].config.routes[0]"},
	} {
		c, ok := byName[tc.name]
		if !ok {
			t.Errorf("no case %q", tc.name)
			continue
		}
		if c.Scope != tc.scope {
			t.Errorf("%s: scope %q, want %q", tc.name, c.Scope, tc.scope)
		}
	}
	a := byName["allocations: 10000 copies"].Req.(*statev1.BeginPrepareRequest).GetAllocations()
	if len(a) != ManyEntries || a[9999].GetPool() != "p" {
		t.Errorf("10000 copies: %d allocations", len(a))
	}
	if s := byName["allocations[0].pool: 1 MiB"].Req.(*statev1.BeginPrepareRequest).GetAllocations()[0].GetPool(); len(s) != BigString || s[0] != 'p' {
		t.Errorf("1 MiB pool: %d bytes starting %q", len(s), s[:1])
	}
}

func TestVerdict(t *testing.T) {
	req := &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{{Pool: "p"}}}
	c := Case{Name: "c", Path: "allocations[0].pool", Scope: "allocations[0].pool", Req: req}
	invalid := func(field string) error { return status.Convert(fielderr.New(field, "bad")).Err() }
	for _, tc := range []struct {
		name string
		err  error
		want string // a part of the verdict; "" is good
	}{
		{"success", nil, ""},
		{"the field", invalid("allocations[0].pool"), ""},
		{"above it", invalid("allocations"), ""},
		{"case aside", invalid("allocations[0].POOL"), ""},
		{"another code", status.Error(codes.NotFound, "x"), "want success or InvalidArgument"},
		{"a panic", status.Error(codes.Internal, "panic in /x: boom"), "want success or InvalidArgument"},
		{"no violation", status.Error(codes.InvalidArgument, "pool: bad"), "no BadRequest field violation"},
		{"not in the request", invalid("config.addresses[0]"), "which the request does not have"},
		{"index outside the list", invalid("allocations[1].pool"), "which the request does not have"},
		{"a sibling", invalid("allocations[0].deviceName"), "not the field changed"},
		{"a plain error", errors.New("x"), "want success or InvalidArgument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Verdict(c, tc.err)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Verdict = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	req := &statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{{Config: &devicev1.DeviceConfig{Addresses: []string{"a", "b"}}}}}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"allocations", true},
		{"allocations[0].config.addresses[1]", true},
		{"allocations[0].config.vlanQoS", true},
		{"allocations[0].preparedDevice.device.name", true},
		{"allocations[0].config.addresses[2]", false},
		{"allocations[0].nope", false},
		{"allocations[0].pool.x", false},
		{"allocations[x]", false},
		{"", false},
	} {
		if got := Resolve(req, tc.path); (got == "") != tc.ok {
			t.Errorf("Resolve(%q) = %q, want ok %v", tc.path, got, tc.ok)
		}
	}
}

func TestOnPath(t *testing.T) {
	for _, tc := range []struct {
		field, path string
		want        bool
	}{
		{"a[0].b", "a[0].b", true},
		{"a", "a[0].b", true},
		{"a[0].b.c", "a[0].b", true},
		{"a[1].b", "a", true},
		{"a[1].b", "a[0].b", false},
		{"a[0].c", "a[0].b", false},
	} {
		if got := onPath(tc.field, tc.path); got != tc.want {
			t.Errorf("onPath(%q, %q) = %v, want %v", tc.field, tc.path, got, tc.want)
		}
	}
}
