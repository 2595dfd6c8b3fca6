package boundaries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/claimconfig"
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

// doc is a Markdown page of the documentation: README.md or docs/*.md.
type doc struct {
	rel  string // its path from the module root, with slashes
	text string
}

// docs reads README.md and every docs/*.md.
func docs(t *testing.T, root string) []doc {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md")
	}
	var out []doc
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, doc{filepath.ToSlash(rel), string(b)})
	}
	return out
}

// prose is the page without its fenced code blocks (each line blanked, so
// that line numbers stay), what a reader reads as text.
func prose(page string) string {
	lines := strings.Split(page, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// codeSpan matches an inline code span of one backtick.
var codeSpan = regexp.MustCompile("`[^`\n]*`")

// mdLink matches an inline Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors is the set of anchors GitHub gives a page's headings: lower
// case, spaces to hyphens, other punctuation dropped, a repeated one
// suffixed -1, -2, ...
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(prose(page), "\n") {
		hashes := len(l) - len(strings.TrimLeft(l, "#"))
		if hashes == 0 || hashes > 6 || !strings.HasPrefix(l[hashes:], " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(l[hashes:])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
	}
	return out
}

// TestDocsLinks checks the documentation's links: README.md links every
// docs/*.md page, and every relative link of README.md and docs/*.md
// points at a file of the repository and, into a Markdown page, at one of
// its headings.
func TestDocsLinks(t *testing.T) {
	root := moduleRoot(t)
	pages := docs(t, root)
	byRel := map[string]string{}
	for _, d := range pages {
		byRel[d.rel] = d.text
	}
	linked := map[string]bool{}
	for _, d := range pages {
		text := codeSpan.ReplaceAllString(prose(d.text), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			rel := d.rel
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(d.rel), file))
				if strings.HasPrefix(rel, "../") {
					t.Errorf("%s: link %s leaves the repository", d.rel, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					t.Errorf("%s: link %s: %s does not exist", d.rel, target, rel)
					continue
				}
			}
			if d.rel == "README.md" {
				linked[rel] = true
			}
			if anchor == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			text, ok := byRel[rel]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
				if err != nil {
					t.Fatal(err)
				}
				text = string(b)
			}
			if !anchors(text)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", d.rel, target, rel, anchor)
			}
		}
	}
	for _, d := range pages {
		if strings.HasPrefix(d.rel, "docs/") && !linked[d.rel] {
			t.Errorf("README.md does not link %s: add it to its list of pages", d.rel)
		}
	}
}

// repoPath matches, in prose, a path of the repository's top-level
// folders; fileName, in a code span, a file name with an extension.
var (
	repoPath  = regexp.MustCompile(`(^|[^A-Za-z0-9_./~$-])((?:services|shared|pods|protos|bench|docs|\.ci)/[A-Za-z0-9_./-]*)`)
	fileName  = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|ya?ml|md|sh|json|proto|png|toml))`")
	topFolder = regexp.MustCompile(`^(services|shared|pods|protos|bench|docs|\.ci)/`)
)

// TestDocsNameFilesThatExist checks that every file or folder the
// documentation names is in the repository: a path under one of its
// top-level folders (a path with a placeholder such as <service> or a
// glob is not checked), and a file name in a code span (a bare name, or a
// path relative to a package the text names, matches any file whose path
// ends with it). Build outputs (_output/) and host paths (/...) are not
// the repository's.
func TestDocsNameFilesThatExist(t *testing.T) {
	root := moduleRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "_output" || e.Name() == ".tools") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, "/"+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	for _, d := range docs(t, root) {
		for i, line := range strings.Split(prose(d.text), "\n") {
			for _, m := range repoPath.FindAllStringSubmatchIndex(line, -1) {
				if end := m[5]; end < len(line) && strings.ContainsRune("<*", rune(line[end])) {
					continue // a placeholder or a glob follows
				}
				p := strings.TrimRight(line[m[4]:m[5]], ".,:;")
				if !exists(p) {
					t.Errorf("%s:%d: %s does not exist", d.rel, i+1, p)
				}
			}
			for _, m := range fileName.FindAllStringSubmatch(line, -1) {
				p := m[1]
				if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "_output/") || topFolder.MatchString(p) {
					continue // a host path, a build output, or one repoPath checks
				}
				if !exists(p) && !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "/"+p) }) {
					t.Errorf("%s:%d: no file %s in the repository", d.rel, i+1, p)
				}
			}
		}
	}
}

// yamlBlock matches a fenced YAML block's body.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// configKeys are the fields that make a YAML block a NodeConfig or
// ClusterConfig, or a part of one.
var configKeys = []string{"pools", "ipPools", "deviceManagerConfigs", "addressPools", "nodeSelector", "driverName", "sriov", "dummy", "host", "subif"}

// TestDocsConfigExamples checks the documentation's YAML examples against
// the code: a NodeConfig or ClusterConfig, or a part of one (its spec,
// its pools, a device manager's block), decodes strictly into the API's
// types, so that every field it names exists; and every claim parameters
// block for driver netdra.io parses as prepare parses it.
func TestDocsConfigExamples(t *testing.T) {
	root := moduleRoot(t)
	for _, d := range docs(t, root) {
		for _, m := range yamlBlock.FindAllStringSubmatch(d.text, -1) {
			block := dedent(m[1])
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
				t.Errorf("%s: a YAML block does not parse: %v\n%s", d.rel, err, block)
				continue
			}
			for _, params := range claimParameters(doc) {
				raw, err := json.Marshal(params)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := claimconfig.Parse(raw); err != nil {
					t.Errorf("%s: claim parameters %s: %v", d.rel, raw, err)
				}
			}
			if !isConfig(doc) {
				continue
			}
			candidates := []any{
				&v1alpha1.NodeConfig{}, &v1alpha1.ClusterConfig{},
				&struct {
					Spec v1alpha1.NodeConfigSpec `json:"spec"`
				}{},
				&struct {
					Spec v1alpha1.ClusterConfigSpec `json:"spec"`
				}{},
				&v1alpha1.NodeConfigSpec{}, &v1alpha1.DeviceManagerConfigs{},
			}
			var errs []string
			for _, c := range candidates {
				err := yaml.UnmarshalStrict([]byte(block), c)
				if err == nil {
					errs = nil
					break
				}
				errs = append(errs, fmt.Sprintf("%T: %v", c, err))
			}
			if errs != nil {
				t.Errorf("%s: a NodeConfig or ClusterConfig example names fields the API does not have:\n%s\n%s", d.rel, block, strings.Join(errs, "\n"))
			}
		}
	}
}

// isConfig says whether a YAML document is a NodeConfig or ClusterConfig,
// or a part of one.
func isConfig(doc map[string]any) bool {
	if k, _ := doc["kind"].(string); k != "" {
		return k == "NodeConfig" || k == "ClusterConfig"
	}
	keys := doc
	if spec, ok := doc["spec"].(map[string]any); ok && len(doc) == 1 {
		keys = spec
	}
	for k := range keys {
		if slices.Contains(configKeys, k) {
			return true
		}
	}
	return false
}

// claimParameters is every "parameters" object beside `driver: netdra.io`
// in a YAML document.
func claimParameters(v any) []any {
	var out []any
	switch v := v.(type) {
	case map[string]any:
		if v["driver"] == "netdra.io" && v["parameters"] != nil {
			out = append(out, v["parameters"])
		}
		for _, c := range v {
			out = append(out, claimParameters(c)...)
		}
	case []any:
		for _, c := range v {
			out = append(out, claimParameters(c)...)
		}
	}
	return out
}

// dedent removes the indentation every non-empty line of s shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	var b bytes.Buffer
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
