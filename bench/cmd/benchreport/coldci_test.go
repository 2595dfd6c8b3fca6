package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A .ci/run log in small: maketest.sh's lanes, test.sh's inside world, a
// test's own bracketed line, and the reports lanes.sh prints.
const ciLogSample = `go version go1.26.0 linux/amd64
[    0] [world-build] >> building Kubernetes
[    1] [setup] >> installing buf
[  400] [unit] ok  	github.com/netdra/netdra/services/dra	3.1s
[  700] [world] >> test world: 16 + 1 (CRI-O) + 23 end-to-end tests in two processes
[  900] [world] [e2e-1] [pod] a line of a test that looks like a lane
[ 1600] [world] [e2e-1] ok  	github.com/netdra/netdra/shared/testinfra/testworld/e2e	880.1s
[ 1700] [world] >> packages: rc=0 (990s)
[ 1700] [world] >> e2e-1: rc=0 (995s)
[ 1700] [world] >> e2e-2: rc=1 (1000s)
[ 1701] >> setup: rc=0 (399s)
[ 1701] >> unit: rc=0 (300s)
[ 1701] >> world-build: rc=0 (690s)
[ 1701] >> world: rc=2 (1001s)
`

func TestParseCILog(t *testing.T) {
	steps, total, err := parseCILog(strings.NewReader(ciLogSample))
	if err != nil {
		t.Fatal(err)
	}
	if total != 1701 {
		t.Errorf("total %d, want 1701", total)
	}
	got := map[string]ciStep{}
	for _, s := range steps {
		got[s.path] = s
	}
	want := map[string]ciStep{
		"world-build": {path: "world-build", start: 0, end: 1701, rc: "0", seconds: "690"},
		"setup":       {path: "setup", start: 1, end: 1701, rc: "0", seconds: "399"},
		"unit":        {path: "unit", start: 400, end: 1701, rc: "0", seconds: "300"},
		"world":       {path: "world", start: 700, end: 1701, rc: "2", seconds: "1001"},
		"world/e2e-1": {path: "world/e2e-1", start: 900, end: 1700, rc: "0", seconds: "995"},
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %+v, want %+v", p, got[p], w)
		}
	}
	// e2e-2 and packages printed nothing but their reports; the test's
	// bracketed word is no lane.
	if _, ok := got["world/e2e-1/pod"]; ok {
		t.Errorf("a test's bracketed word taken for a lane: %+v", steps)
	}
	if len(steps) != 5 {
		t.Errorf("%d steps, want 5: %+v", len(steps), steps)
	}
}

// TestColdCISectionCarried: make ci-cold writes only its section, and
// make bench's report carries it over.
func TestColdCISectionCarried(t *testing.T) {
	dir := t.TempDir()
	log, out := filepath.Join(dir, "ci.log"), filepath.Join(dir, "RESULTS.md")
	if err := os.WriteFile(log, []byte(ciLogSample), 0o644); err != nil {
		t.Fatal(err)
	}
	before := "# results\n\nbefore\n"
	if err := os.WriteFile(out, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(dir, "targets.yaml")
	if err := os.WriteFile(tf, []byte("targets: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runColdCI(log, out, tf, "clone of abc", 2); err == nil || !strings.Contains(err.Error(), "coldCIMinutes") {
		t.Fatalf("a targets file without coldCIMinutes: %v, want an error naming it", err)
	}
	if err := os.WriteFile(tf, []byte("coldCIMinutes: 25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runColdCI(log, out, tf, "clone of abc", 2); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if !strings.HasPrefix(s, before) || !strings.Contains(s, "**28m21s, red (exit 2); over the 25-minute budget.**") ||
		!strings.Contains(s, "| world/e2e-1 | 900 | 995 s | 0 |") || !strings.Contains(s, "clone of abc") {
		t.Errorf("report:\n%s", s)
	}
	if s := markedSection(s, coldBegin, coldEnd); s == "" {
		t.Error("no cold CI section")
	}
}

// TestCarryMarked: make bench's report keeps every marked section of the
// old one, a hand-written one too, in place or at its end, and nothing
// between sections.
func TestCarryMarked(t *testing.T) {
	hand := "<!-- prepare-by-hand:begin (written by hand) -->\n### by hand\n<!-- prepare-by-hand:end -->"
	cold := coldBegin + "\n## cold\n" + coldEnd
	old := "# old\n\nold prose\n\n" + hand + "\n\nmore old prose\n\n" + cold + "\n"
	got := carryMarked(old, "# new\n\nnew prose\n")
	want := "# new\n\nnew prose\n\n" + hand + "\n\n" + cold + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// A report that has a section of its own gets old's in its place.
	if got := carryMarked(old, "# new\n\n"+coldBegin+"\nfresh\n"+coldEnd+"\n"); !strings.Contains(got, "## cold") || strings.Contains(got, "fresh") {
		t.Errorf("old's section not put in place of the report's own:\n%s", got)
	}
}

// The set-up's apt installs are listed (the Go tools it installs are
// not), each once; a log without any says the machine had them.
func TestCIInstalls(t *testing.T) {
	log := strings.Join([]string{
		"[    0] >> installing runc from Debian for the test world's real node",
		"[    8] [setup] >> installing buf v1.75.0 (cached after the first time)",
		"[  269] [setup] >> installing clang-14, llvm-14 and libbpf-dev from Debian to compile the eBPF programs",
		"[ 1150] [checks] >> installing busybox-static cpio kmod (+5s)",
		"[ 1184] [checks] >> installing qemu-system-x86 1:10.0.2+ds-2 from bookworm-backports (+39s)",
		"[ 1190] [checks] >> installing runc from Debian for the test world's real node",
	}, "\n")
	got, err := ciInstalls(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"runc from Debian", "clang-14, llvm-14 and libbpf-dev from Debian", "busybox-static cpio kmod",
		"qemu-system-x86 1:10.0.2+ds-2 from bookworm-backports"}
	if !slices.Equal(got, want) {
		t.Errorf("installs %q, want %q", got, want)
	}
	var b strings.Builder
	writeColdCI(&b, nil, 60, 45, nil, "about", 0)
	if !strings.Contains(b.String(), "The machine had every apt package the run needs already installed.") {
		t.Errorf("without installs:\n%s", b.String())
	}
}
