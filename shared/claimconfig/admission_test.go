package claimconfig

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidations checks that the admission policy has a validation for
// every parameter of Reference, and only for those (and the parameters'
// keys), each with a check and a message, and that the parameters with no
// rule at apply are said in PrepareOnly.
func TestValidations(t *testing.T) {
	want := []string{"parameters"}
	for _, p := range Reference {
		want = append(want, p.Name)
		if _, ok := fields[p.Name]; !ok {
			t.Errorf("%s has no check for the admission policy", p.Name)
		}
	}
	for name := range fields {
		if !slices.ContainsFunc(Reference, func(p Param) bool { return p.Name == name }) {
			t.Errorf("the admission policy checks %s, which Reference does not have", name)
		}
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, validationParams()); diff != "" {
		t.Errorf("validations (-want +got):\n%s", diff)
	}
	for _, v := range Validations() {
		if v.Expression == "" || v.MessageExpression == "" || v.Reason != "Invalid" {
			t.Errorf("%s: %+v", v.Param, v)
		}
		if s := v.Expression + v.MessageExpression; strings.Contains(s, "$v") || strings.Contains(s, "$o") {
			t.Errorf("%s: a placeholder is left: %s", v.Param, v.Expression)
		}
	}
	if len(PrepareOnly) == 0 {
		t.Error("PrepareOnly is empty")
	}
}

// TestPrepareOnlyDoc checks that docs/claims.md's list of what only
// prepare refuses is PrepareOnly.
func TestPrepareOnlyDoc(t *testing.T) {
	const begin, end = "<!-- prepare-only:begin -->\n", "<!-- prepare-only:end -->"
	b, err := os.ReadFile(claimsDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(b), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q ... %q", claimsDoc, begin, end)
	}
	var list strings.Builder
	for _, p := range PrepareOnly {
		list.WriteString("- " + p + "\n")
	}
	want := before + begin + list.String() + end + after
	if *update {
		if err := os.WriteFile(claimsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(b) {
		t.Errorf("docs/claims.md's prepare-only list is stale: go test ./shared/claimconfig -run TestPrepareOnlyDoc -update")
	}
}
