package boundaries

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMELayoutNamesEveryPackage checks the README's Layout section
// against the product module: every package under services/ and shared/
// is named there by its last path element, so a package added without a
// line in the layout fails here rather than drifting out of the README.
// The test world is its own module and is not checked.
func TestREADMELayoutNamesEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	layout := readmeLayout(string(b))
	if layout == "" {
		t.Fatal("README.md has no \"## Layout\" section with a code block")
	}
	cmd := exec.Command("go", "list", "./services/...", "./shared/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		name := path.Base(pkg)
		word := regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(name) + `([^A-Za-z0-9_-]|$)`)
		if !word.MatchString(layout) {
			t.Errorf("README.md's Layout section does not name %s (%q): add a line for it", strings.TrimPrefix(pkg, module), name)
		}
	}
}

// readmeLayout is the first code block after the README's "## Layout"
// heading, or "" when there is none.
func readmeLayout(readme string) string {
	_, section, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		return ""
	}
	_, block, ok := strings.Cut(section, "```\n")
	if !ok {
		return ""
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}
