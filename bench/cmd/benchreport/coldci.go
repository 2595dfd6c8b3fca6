package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The cold CI section's markers: make ci-cold replaces what is between
// them; make bench, make bench-scale and make soak carry it over.
const (
	coldBegin = "<!-- coldci:begin (make ci-cold writes this section) -->"
	coldEnd   = "<!-- coldci:end -->"
)

// The lines of a .ci/run log this reads: every line is stamped with the
// seconds since the run's start, then carries one or more lane names
// (maketest.sh's, then test.sh's inside the world lane); a lane's end is
// lanes.sh's report line, ">> NAME: rc=N (Ss)".
var (
	ciStamp  = regexp.MustCompile(`^\[\s*(\d+)\] ((?:\[[a-z0-9-]+\] )*)(.*)$`)
	ciLaneRC = regexp.MustCompile(`^>> ([a-z0-9-]+): rc=(\S+) \((\S+)s\)$`)
	ciLane   = regexp.MustCompile(`\[([a-z0-9-]+)\]`)
)

// ciInstall matches the set-up's line for apt packages it installs:
// maketest.sh's ">> installing PKGS from SUITE ..." and the kernel rig's
// ">> installing PKGS (+Ns)".
var ciInstall = regexp.MustCompile(`>> installing (.+?)(?: from (Debian|bookworm-backports)\b| \(\+\d+s\)$)`)

// ciInstalls lists what the run's set-up installed with apt, as the log
// names it ("runc from Debian"), in the order it came.
func ciInstalls(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if m := ciInstall.FindStringSubmatch(sc.Text()); m != nil {
			s := m[1]
			if m[2] != "" {
				s += " from " + m[2]
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, sc.Err()
}

// ciStep is one lane of a CI run: where it is (its enclosing lanes'
// names, outermost first, then its own), when its first line came (go
// test prints a package's output when it ends, so a lane's first line can
// come long after its start), when it was reported (lanes.sh reports
// every lane once all have ended; -1: never) and how long it took.
type ciStep struct {
	path        string
	start, end  int
	rc, seconds string
}

// parseCILog reads a .ci/run log: the steps in the order their first line
// came, the last stamp (the run's length) and whether make's last word
// was a failure. A line that is not stamped (go's own first line) is
// skipped.
func parseCILog(r io.Reader) (steps []ciStep, total int, err error) {
	idx := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		m := ciStamp.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		t, _ := strconv.Atoi(m[1])
		total = t
		var names []string
		for _, n := range ciLane.FindAllStringSubmatch(m[2], -1) {
			names = append(names, n[1])
		}
		for i := range names {
			p := strings.Join(names[:i+1], "/")
			if _, ok := idx[p]; !ok {
				idx[p] = len(steps)
				steps = append(steps, ciStep{path: p, start: t, end: -1})
			}
		}
		// The report line of a lane comes from its enclosing lane's
		// output (or from the run's, for maketest.sh's lanes).
		if rc := ciLaneRC.FindStringSubmatch(m[3]); rc != nil {
			p := strings.Join(append(names, rc[1]), "/")
			i, ok := idx[p]
			if !ok {
				continue
			}
			steps[i].end, steps[i].rc, steps[i].seconds = t, rc[2], rc[3]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	// A bracketed word at the start of a test's own line looks like a
	// lane; a lane whose enclosing lane reported had reported itself
	// (lanes.sh reports every lane it ran), so one that did not is none.
	var kept []ciStep
	for _, s := range steps {
		if parent, _, nested := cutLast(s.path); s.end < 0 && nested && steps[idx[parent]].end >= 0 {
			continue
		}
		kept = append(kept, s)
	}
	return kept, total, nil
}

// cutLast splits a step's path at its last lane name.
func cutLast(path string) (parent, name string, ok bool) {
	i := strings.LastIndex(path, "/")
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// runColdCI rewrites only the report's cold CI section from the log of a
// cold run of .ci/run, set beside the budget of the targets file
// targetsPath (an error when it has none); what describes the run (the
// commit, the machine's state) comes in about.
func runColdCI(log, out, targetsPath, about string, rc int) error {
	ts, err := readTargets(targetsPath)
	if err != nil {
		return err
	}
	if ts.ColdCIMinutes <= 0 {
		return fmt.Errorf("%s: coldCIMinutes: required, a positive number of minutes", targetsPath)
	}
	f, err := os.Open(log)
	if err != nil {
		return err
	}
	defer f.Close()
	steps, total, err := parseCILog(f)
	if err != nil {
		return fmt.Errorf("%s: %w", log, err)
	}
	if len(steps) == 0 {
		return fmt.Errorf("%s: no stamped lane lines: not a .ci/run log", log)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	installs, err := ciInstalls(f)
	if err != nil {
		return fmt.Errorf("%s: %w", log, err)
	}
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var b strings.Builder
	writeColdCI(&b, steps, total, ts.ColdCIMinutes, installs, about, rc)
	return os.WriteFile(out, []byte(spliceMarked(string(old), strings.TrimRight(b.String(), "\n"), coldBegin, coldEnd)), 0o644)
}

// writeColdCI writes the cold CI section: the run's time against
// budgetMinutes, what its set-up installed with apt (installs: none means
// the machine had every package already) and each lane's times.
func writeColdCI(w io.Writer, steps []ciStep, total, budgetMinutes int, installs []string, about string, rc int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s", coldBegin)
	p("## A cold CI run")
	p("")
	p("`make ci-cold`: `bash .ci/run` on a clean clone, with empty Go caches (build and modules), HOME and kernel-rig cache, as on a fresh machine.")
	if len(installs) == 0 {
		p("The machine had every apt package the run needs already installed. %s", about)
	} else {
		p("The run installed with apt what it needs (%s). %s", strings.Join(installs, ", "), about)
	}
	verdict := "within"
	if total > budgetMinutes*60 {
		verdict = "over"
	}
	status := "green"
	if rc != 0 {
		status = fmt.Sprintf("red (exit %d)", rc)
	}
	// lanes.sh reports maketest.sh's lanes once all have ended.
	finished := false
	for _, s := range steps {
		if !strings.Contains(s.path, "/") && s.end >= 0 {
			finished = true
		}
	}
	if !finished {
		status = "stopped before its end"
	}
	p("")
	p("**%dm%02ds, %s; %s the %d-minute budget.**", total/60, total%60, status, verdict, budgetMinutes)
	p("")
	p("Each step's lane (maketest.sh's, then test.sh's inside `world`), when its first line came, in seconds from the start")
	p("(go test prints a package's lines when it ends), and how long it took:")
	p("")
	p("| step | first line | took | rc |")
	p("|---|---:|---:|---|")
	for _, s := range steps {
		took, rc := "—", "did not end"
		if s.end >= 0 {
			took, rc = s.seconds+" s", s.rc
		}
		p("| %s | %d | %s | %s |", s.path, s.start, took, rc)
	}
	p("%s", coldEnd)
}
