package hostdev

import (
	"strings"
	"testing"
)

func TestDeviceName(t *testing.T) {
	for _, tc := range []struct {
		ifName string
		want   string // "" when sanitized: checked by shape
		prefix string // the sanitized part before the hash
	}{
		{ifName: "eth0", want: "eth0"},
		{ifName: "ens1f0np0", want: "ens1f0np0"},
		{ifName: "a-b", want: "a-b"},
		{ifName: "0eth", want: "0eth"},
		{ifName: "Eth0", prefix: "eth0"},
		{ifName: "eth0.100", prefix: "eth0-100"},
		{ifName: "br_int", prefix: "br-int"},
		{ifName: "-x-", prefix: "x"},
		{ifName: "eth0-", prefix: "eth0"},
		{ifName: "__", prefix: "if"},
		{ifName: "wlp0s20f3@x", prefix: "wlp0s20f3-x"},
	} {
		t.Run(tc.ifName, func(t *testing.T) {
			got := deviceName(tc.ifName)
			if !isDNSLabel(got) {
				t.Errorf("deviceName(%q) = %q, not a DNS label", tc.ifName, got)
			}
			if got != deviceName(tc.ifName) {
				t.Errorf("deviceName(%q) is not stable", tc.ifName)
			}
			if tc.want != "" {
				if got != tc.want {
					t.Errorf("deviceName(%q) = %q, want %q", tc.ifName, got, tc.want)
				}
				return
			}
			rest, ok := strings.CutPrefix(got, tc.prefix+"-")
			if !ok || len(rest) != 6 {
				t.Errorf("deviceName(%q) = %q, want %q-<6 hex digits>", tc.ifName, got, tc.prefix)
			}
		})
	}
	if a, b := deviceName("eth0.1"), deviceName("eth0_1"); a == b {
		t.Errorf("eth0.1 and eth0_1 both became %q", a)
	}
	if a := deviceName("Eth0"); a == "eth0" {
		t.Errorf("Eth0 became the name of eth0")
	}
}
