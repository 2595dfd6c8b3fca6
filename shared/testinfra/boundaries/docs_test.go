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

// TestLayoutNamesEveryPackage checks docs/layout.md against the product
// module: every package under services/ and shared/ is named in its code
// block by its last path element, so a package added without a line in
// the layout fails here rather than drifting out of the documentation.
// The test world is its own module and is not checked.
func TestLayoutNamesEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	layout := layoutBlock(string(b))
	if layout == "" {
		t.Fatal("docs/layout.md has no code block under its \"# Layout\" heading")
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
			t.Errorf("docs/layout.md does not name %s (%q): add a line for it", strings.TrimPrefix(pkg, module), name)
		}
	}
}

// layoutBlock is the first code block after the page's "# Layout" heading,
// or "" when there is none.
func layoutBlock(page string) string {
	_, section, ok := strings.Cut("\n"+page, "\n# Layout\n")
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
