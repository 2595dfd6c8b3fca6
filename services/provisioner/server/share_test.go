package server

import (
	"errors"
	"strings"
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Setup's share check: a shared device takes a share with a valid ID,
// any other device none; the inventory's device is not changed.
func TestWithShare(t *testing.T) {
	shared := &devicev1.Device{Name: "mvs", BandwidthCapacity: 1_000_000_000}
	counted := &devicev1.Device{Name: "mv-0"}
	for _, tc := range []struct {
		name  string
		dev   *devicev1.Device
		share *devicev1.Share
		field string
	}{
		{"a share", shared, &devicev1.Share{Id: "74e23436-3c8b-4e9a-a90f-685fa95c3e69", Bandwidth: 40_000_000}, ""},
		{"no share of a shared device", shared, nil, "share"},
		{"a share of a counted device", counted, &devicev1.Share{Id: "s1", Bandwidth: 1}, "share"},
		{"a counted device", counted, nil, ""},
		{"a share ID with a slash", shared, &devicev1.Share{Id: "../x", Bandwidth: 1}, "share.id"},
		{"an upper-case share ID", shared, &devicev1.Share{Id: "ABC", Bandwidth: 1}, "share.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withShare(tc.dev, tc.share)
			var fe *fielderr.Error
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("got %v", err)
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Fatalf("got %v, want an error naming %s", err, tc.field)
			case tc.field == "" && got.GetShare().GetId() != tc.share.GetId():
				t.Errorf("share %v, want %v", got.GetShare(), tc.share)
			}
			if shared.Share != nil || counted.Share != nil {
				t.Error("the inventory's device was changed")
			}
		})
	}
}

// A share's slot (its eBPF pin directory) is its own, bpffs takes it (no
// '.'), and no device name (a DNS label) is one.
func TestSlot(t *testing.T) {
	pd := func(share string) *devicev1.PreparedDevice {
		d := &devicev1.Device{Name: "mvs"}
		if share != "" {
			d.Share = &devicev1.Share{Id: share, Bandwidth: 1}
		}
		return &devicev1.PreparedDevice{Device: d}
	}
	a, b, whole := slot(pd("s-1")), slot(pd("s-2")), slot(pd(""))
	if a == b || a == whole || whole != "mvs" {
		t.Errorf("slots %q, %q, %q: want distinct, the whole device's its name", a, b, whole)
	}
	if strings.Contains(a, ".") || !strings.Contains(a, "_") {
		t.Errorf("slot %q: want '_' (in no DNS label) and no '.' (bpffs refuses it)", a)
	}
}
