package link

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func TestValidate(t *testing.T) {
	route := func(dst, gw string) []*devicev1.Route { return []*devicev1.Route{{Destination: dst, Gateway: gw}} }
	for _, tc := range []struct {
		name      string
		cfg       *devicev1.DeviceConfig
		wantField string // "" for valid
	}{
		{"nil", nil, ""},
		{"empty", &devicev1.DeviceConfig{}, ""},
		{"everything", &devicev1.DeviceConfig{
			PodIfName:  "net1",
			MacAddress: "02:AA:bb:cc:dd:ee",
			Mtu:        9000,
			Addresses:  []string{"192.0.2.10/24", "2001:db8::10/64", "10.0.0.1/32"},
			Routes: []*devicev1.Route{
				{Destination: "0.0.0.0/0", Gateway: "192.0.2.1"},
				{Destination: "::/0", Gateway: "fe80::1"},
				{Destination: "10.0.0.0/8"},
			},
		}, ""},
		{"name of 15 bytes", &devicev1.DeviceConfig{PodIfName: strings.Repeat("a", 15)}, ""},
		{"name of 16 bytes", &devicev1.DeviceConfig{PodIfName: strings.Repeat("a", 16)}, "podIfName"},
		{"name with slash", &devicev1.DeviceConfig{PodIfName: "net/1"}, "podIfName"},
		{"name with space", &devicev1.DeviceConfig{PodIfName: "net 1"}, "podIfName"},
		{"name with tab", &devicev1.DeviceConfig{PodIfName: "net\t1"}, "podIfName"},
		{"name with NUL", &devicev1.DeviceConfig{PodIfName: "net\x001"}, "podIfName"},
		{"name with colon", &devicev1.DeviceConfig{PodIfName: "eth0:1"}, "podIfName"},
		{"name is a pattern", &devicev1.DeviceConfig{PodIfName: "net%d"}, "podIfName"},
		{"name dot", &devicev1.DeviceConfig{PodIfName: "."}, "podIfName"},
		{"name dot dot", &devicev1.DeviceConfig{PodIfName: ".."}, "podIfName"},
		{"name lo", &devicev1.DeviceConfig{PodIfName: "lo"}, "podIfName"},
		{"name with a non-ASCII letter", &devicev1.DeviceConfig{PodIfName: "nét1"}, "podIfName"},
		{"name with @", &devicev1.DeviceConfig{PodIfName: "net@1"}, "podIfName"},
		{"MAC unparsable", &devicev1.DeviceConfig{MacAddress: "02:aa:bb:cc:dd"}, "macAddress"},
		{"MAC multicast", &devicev1.DeviceConfig{MacAddress: "01:00:5e:00:00:01"}, "macAddress"},
		{"MAC broadcast", &devicev1.DeviceConfig{MacAddress: "ff:ff:ff:ff:ff:ff"}, "macAddress"},
		{"MAC zero", &devicev1.DeviceConfig{MacAddress: "00:00:00:00:00:00"}, "macAddress"},
		{"MAC EUI-64", &devicev1.DeviceConfig{MacAddress: "02:00:00:00:00:00:00:01"}, "macAddress"},
		{"MTU 67", &devicev1.DeviceConfig{Mtu: 67}, "mtu"},
		{"MTU 68", &devicev1.DeviceConfig{Mtu: 68}, ""},
		{"MTU 65535", &devicev1.DeviceConfig{Mtu: 65535}, ""},
		{"MTU 65536", &devicev1.DeviceConfig{Mtu: 65536}, "mtu"},
		{"address without prefix", &devicev1.DeviceConfig{Addresses: []string{"192.0.2.10/24", "192.0.2.11"}}, "addresses[1]"},
		{"address prefix too long", &devicev1.DeviceConfig{Addresses: []string{"192.0.2.10/33"}}, "addresses[0]"},
		{"address unspecified", &devicev1.DeviceConfig{Addresses: []string{"0.0.0.0/0"}}, "addresses[0]"},
		{"address multicast", &devicev1.DeviceConfig{Addresses: []string{"ff02::1/64"}}, "addresses[0]"},
		{"address IPv4-mapped", &devicev1.DeviceConfig{Addresses: []string{"::ffff:192.0.2.1/120"}}, "addresses[0]"},
		{"address with zone", &devicev1.DeviceConfig{Addresses: []string{"fe80::1%eth0/64"}}, "addresses[0]"},
		{"route nil", &devicev1.DeviceConfig{Routes: []*devicev1.Route{nil}}, "routes[0]"},
		{"route without destination", &devicev1.DeviceConfig{Routes: route("", "192.0.2.1")}, "routes[0].destination"},
		{"route destination not CIDR", &devicev1.DeviceConfig{Routes: route("10.0.0.0", "")}, "routes[0].destination"},
		{"route destination host bits", &devicev1.DeviceConfig{Routes: route("10.0.0.1/8", "")}, "routes[0].destination"},
		{"route gateway not an IP", &devicev1.DeviceConfig{Routes: route("10.0.0.0/8", "gw")}, "routes[0].gateway"},
		{"route gateway other family", &devicev1.DeviceConfig{Routes: []*devicev1.Route{
			{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"},
			{Destination: "10.0.0.0/8", Gateway: "2001:db8::1"},
		}}, "routes[1].gateway"},
		{"route gateway with CIDR", &devicev1.DeviceConfig{Routes: route("10.0.0.0/8", "192.0.2.1/24")}, "routes[0].gateway"},
		{"route gateway unspecified", &devicev1.DeviceConfig{Routes: route("::/0", "::")}, "routes[0].gateway"},
		{"route gateway with zone", &devicev1.DeviceConfig{Routes: route("::/0", "fe80::1%eth0")}, "routes[0].gateway"},
		{"first bad field wins", &devicev1.DeviceConfig{PodIfName: "a/b", Mtu: 1}, "podIfName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.cfg)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *FieldError for %s", err, tc.wantField)
			}
			if diff := cmp.Diff(tc.wantField, fe.Field); diff != "" {
				t.Errorf("FieldError.Field (-want +got):\n%s", diff)
			}
			if !errors.Is(err, fielderr.ErrInvalid) {
				t.Errorf("Validate() = %v, does not match fielderr.ErrInvalid", err)
			}
			t.Log(err)
		})
	}
}
