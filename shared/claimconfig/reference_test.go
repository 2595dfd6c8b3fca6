package claimconfig

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite docs/claims.md's claim reference and prepare-only list")

const (
	// claimsDoc is the page holding the claim reference and the
	// prepare-only list.
	claimsDoc = "../../docs/claims.md"
	beginMark = "<!-- claim-parameters:begin -->\n"
	endMark   = "<!-- claim-parameters:end -->"
)

// TestReference checks that Reference documents every parameter, once,
// and that docs/claims.md's copy of it is current.
func TestReference(t *testing.T) {
	var got []string
	for _, p := range Reference {
		got = append(got, p.Name)
		if p.Doc == "" || p.Example == "" || p.Type == "" {
			t.Errorf("%s: no type, doc or example", p.Name)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(documentedNames(), got); diff != "" {
		t.Errorf("Reference names (-parameters +documented):\n%s", diff)
	}

	b, err := os.ReadFile(claimsDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(b), beginMark)
	_, after, ok2 := strings.Cut(rest, endMark)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q ... %q", claimsDoc, beginMark, endMark)
	}
	want := before + beginMark + Markdown() + endMark + after
	if *update {
		if err := os.WriteFile(claimsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(b) {
		t.Errorf("docs/claims.md's claim reference is stale: go test ./shared/claimconfig -run TestReference -update")
	}
}
