package link

import (
	"testing"

	"github.com/netdra/netdra/shared/claimconfig"
)

// FuzzClaimConfig: whatever claim parameters claimconfig accepts (dra
// parses them at prepare), Validate accepts too, so that a claim the
// kubelet was told is prepared does not fail at Attach for a value dra
// could have refused.
func FuzzClaimConfig(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"podIfName":"net1","mac":"02:aa:00:00:00:01","mtu":9000,"addresses":["10.0.0.2/24","fd00::2/64"],
			"routes":[{"destination":"10.1.0.0/16","gateway":"10.0.0.1"},{"destination":"::/0","gateway":"fe80::1"}]}`,
		`{"addresses":["255.255.255.255/32"]}`,
		`{"routes":[{"destination":"::ffff:0.0.0.0/96"}]}`,
		`{"routes":[{"destination":"10.0.0.0/8","gateway":"0.0.0.0"}]}`,
		`{"routes":[{"destination":"ff00::/8","gateway":"ff02::1"}]}`,
		`{"routes":[{"destination":"::/0","gateway":"fe80::1%eth0"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := claimconfig.Parse(raw)
		if err != nil {
			return
		}
		if err := Validate(cfg); err != nil {
			t.Fatalf("claimconfig accepted %q as %v, which Attach refuses: %v", raw, cfg, err)
		}
	})
}
