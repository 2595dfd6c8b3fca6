package tiltcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDockerfile_TargetPerService: pods/Dockerfile has a final stage for
// every service (services/*/main.go), named after it, whose entrypoint is
// /usr/local/bin/<service>, the path the manifests' probes and Tilt's live
// update use; and the dev stage make image-dev builds.
func TestDockerfile_TargetPerService(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "pods/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]string{} // name -> the stage's text
	var names []string
	for _, part := range regexp.MustCompile(`(?m)^FROM `).Split(string(b), -1)[1:] {
		m := regexp.MustCompile(`^\S+ AS (\S+)`).FindStringSubmatch(part)
		if m == nil {
			t.Fatalf("a stage without a name: FROM %s", strings.SplitN(part, "\n", 2)[0])
		}
		stages[m[1]] = part
		names = append(names, m[1])
	}
	mains, err := filepath.Glob(filepath.Join(root, "services/*/main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no services (%v)", err)
	}
	for _, m := range mains {
		svc := filepath.Base(filepath.Dir(m))
		stage, ok := stages[svc]
		if !ok {
			t.Errorf("no stage %s (have %q)", svc, names)
			continue
		}
		bin := "/usr/local/bin/" + svc
		// The binary may be owned by the stage's user (--chown): a process
		// pages out its own binary's pages only as the file's owner.
		copied := regexp.MustCompile(`(?m)^COPY --from=build (--chown=\d+:\d+ )?/out/` + regexp.QuoteMeta(svc+" "+bin) + `$`)
		if !copied.MatchString(stage) || !strings.Contains(stage, `ENTRYPOINT ["`+bin+`"]`) {
			t.Errorf("stage %s does not run %s built by the build stage:\n%s", svc, bin, stage)
		}
		if !regexp.MustCompile(`(?m)^USER \d+:\d+$`).MatchString(stage) {
			t.Errorf("stage %s does not say which uid it runs as", svc)
		}
	}
	if !slices.Contains(names, "dev") || !slices.Contains(names, "build") {
		t.Errorf("stages %q: want build and dev too", names)
	}
}
