package realnode

import (
	"os"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// TestCRIONRIDropIn: the install guide's CRI-O drop-in, as the real node
// writes it, is TOML that turns CRI-O's NRI on; a guide without the
// command, or with two, is refused naming the guide.
func TestCRIONRIDropIn(t *testing.T) {
	doc, err := os.ReadFile("../../../../" + installDoc)
	if err != nil {
		t.Fatal(err)
	}
	name, content, err := crioNRIDropIn(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Crio struct {
			NRI map[string]any `toml:"nri"`
		} `toml:"crio"`
	}
	if err := toml.Unmarshal(content, &cfg); err != nil {
		t.Fatalf("%s's drop-in %s is not TOML: %v\n%s", installDoc, name, err, content)
	}
	if on, _ := cfg.Crio.NRI["enable_nri"].(bool); !on {
		t.Errorf("%s's drop-in %s does not set crio.nri.enable_nri = true:\n%s", installDoc, name, content)
	}
	t.Logf("%s: %q", name, content)

	line := "printf '[crio.nri]\\nenable_nri = true\\n' >/etc/crio/crio.conf.d/10-nri.conf\n"
	for _, bad := range []string{"no drop-in here\n", line + line} {
		if _, _, err := crioNRIDropIn(bad); err == nil || !strings.Contains(err.Error(), installDoc) {
			t.Errorf("crioNRIDropIn(%q) = %v, want an error naming %s", bad, err, installDoc)
		}
	}
}
