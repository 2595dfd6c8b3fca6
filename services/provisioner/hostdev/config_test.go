package hostdev

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/fielderr"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       *provisionerv1.HostConfig
		wantField string // "" for valid
	}{
		{"names", &provisionerv1.HostConfig{IfNames: []string{"eth1", "ens1f*", "data[0-3]", "net?"}}, ""},
		{"drivers only", &provisionerv1.HostConfig{Drivers: []string{"ixgbe"}}, ""},
		{"vendor only", &provisionerv1.HostConfig{VendorIds: []string{"0x8086", "0x15B3"}}, ""},
		{"device only", &provisionerv1.HostConfig{DeviceIds: []string{"0x10d3"}}, ""},
		{"all", &provisionerv1.HostConfig{IfNames: []string{"eth*"}, Drivers: []string{"e1000e"}, VendorIds: []string{"0x8086"}, DeviceIds: []string{"0x10d3"}}, ""},
		{"name of 15 bytes", &provisionerv1.HostConfig{IfNames: []string{strings.Repeat("a", 15)}}, ""},
		{"long glob", &provisionerv1.HostConfig{IfNames: []string{strings.Repeat("a", 15) + "*"}}, ""},
		{"nil", nil, "ifNames"},
		{"nothing selected", &provisionerv1.HostConfig{Enabled: true}, "ifNames"},
		{"empty name", &provisionerv1.HostConfig{IfNames: []string{"eth0", ""}}, "ifNames[1]"},
		{"bad glob", &provisionerv1.HostConfig{IfNames: []string{"eth0", "data["}}, "ifNames[1]"},
		{"bad glob after a match", &provisionerv1.HostConfig{IfNames: []string{"a[", "eth\\"}}, "ifNames[0]"},
		{"trailing backslash", &provisionerv1.HostConfig{IfNames: []string{"eth\\"}}, "ifNames[0]"},
		{"slash", &provisionerv1.HostConfig{IfNames: []string{"eth/0"}}, "ifNames[0]"},
		{"name of 16 bytes", &provisionerv1.HostConfig{IfNames: []string{strings.Repeat("a", 16)}}, "ifNames[0]"},
		{"empty driver", &provisionerv1.HostConfig{Drivers: []string{"ixgbe", ""}}, "drivers[1]"},
		{"driver with space", &provisionerv1.HostConfig{Drivers: []string{"e1000 e"}}, "drivers[0]"},
		{"vendor without 0x", &provisionerv1.HostConfig{VendorIds: []string{"8086"}}, "vendorIds[0]"},
		{"vendor too long", &provisionerv1.HostConfig{VendorIds: []string{"0x80861"}}, "vendorIds[0]"},
		{"vendor not hex", &provisionerv1.HostConfig{VendorIds: []string{"0x80g6"}}, "vendorIds[0]"},
		{"device bad", &provisionerv1.HostConfig{IfNames: []string{"eth0"}, DeviceIds: []string{"0x10d3", "10d3"}}, "deviceIds[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(testLogger(t), t.TempDir(), tc.cfg)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) {
				t.Fatalf("New() = %v, want a *fielderr.Error for %s", err, tc.wantField)
			}
			if diff := cmp.Diff(tc.wantField, fe.Field); diff != "" {
				t.Errorf("field (-want +got):\n%s", diff)
			}
			t.Log(err)
		})
	}
}

func TestNew_Options(t *testing.T) {
	cfg := &provisionerv1.HostConfig{IfNames: []string{"eth0"}}
	for _, tc := range []struct {
		name string
		opt  Option
		want error // nil: any error
	}{
		{"zero resync", WithResync(0), nil},
		{"negative resync", WithResync(-time.Second), nil},
		{"missing netns", WithNetns("/nonexistent/netns"), nil},
		{"netns not a netns", WithNetns("/proc/self/ns/uts"), netlinkns.ErrNotNetns},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(testLogger(t), "", cfg, tc.opt)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("New() = %v, want an error (%v)", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestSelector(t *testing.T) {
	sel, err := parseConfig(&provisionerv1.HostConfig{IfNames: []string{"eth0", "data*", "ens[12]f0"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"eth0", true},
		{"eth01", false},
		{"data", true},
		{"data17", true},
		{"xdata0", false},
		{"ens1f0", true},
		{"ens3f0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sel.matchName(tc.name); got != tc.want {
				t.Errorf("matchName(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
