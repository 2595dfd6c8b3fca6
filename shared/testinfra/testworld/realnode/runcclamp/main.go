// Command runcclamp is CRI-O's runtime on the real node: it runs the runc
// named by $REALNODE_RUNC with its own arguments, after raising a lower
// process.oomScoreAdj of the bundle's config.json (create, run) or of the
// process file (exec) to its own score. A test machine's capability
// bounding set may lack CAP_SYS_RESOURCE, without which no process may
// lower its score and runc fails the container ("can't get final child's
// PID from pipe"); the pause container always asks for -998. containerd
// has the same clamp built in (restrict_oom_score_adj), CRI-O has none.
// Likewise it drops a bundle's linux.resources.hugepageLimits when the
// machine's cgroups have no hugetlb controller, where runc would fail the
// container ("cannot set hugetlb limit"): containerd tolerates a missing
// hugetlb controller the same way (tolerate_missing_hugetlb_controller).
// It exits 1, naming the file, when it cannot read or rewrite one.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	runc := os.Getenv("REALNODE_RUNC")
	if runc == "" {
		fail(fmt.Errorf("REALNODE_RUNC is not set"))
	}
	own, err := ownScore()
	if err != nil {
		fail(err)
	}
	noHugetlb := hugetlbMissing()
	for _, f := range specFiles(os.Args[1:]) {
		if err := clamp(f.path, f.process, own, noHugetlb); err != nil {
			fail(err)
		}
	}
	fail(syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ()))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "runcclamp:", err)
	os.Exit(1)
}

func ownScore() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

type specFile struct {
	path    string
	process bool // a process file (exec), not a bundle's config.json
}

// specFiles finds the bundle (--bundle, -b) and process file (--process,
// -p) runc's arguments name.
func specFiles(args []string) []specFile {
	var out []specFile
	for i, a := range args {
		name, val, hasVal := strings.Cut(a, "=")
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		switch name {
		case "--bundle", "-b":
			out = append(out, specFile{path: filepath.Join(val, "config.json")})
		case "--process", "-p":
			out = append(out, specFile{path: val, process: true})
		}
	}
	return out
}

// hugetlbMissing reports whether this machine's cgroups lack the hugetlb
// controller (cgroup v2: not in the root's cgroup.controllers; v1: no
// hierarchy mounted for it).
func hugetlbMissing() bool {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " hugetlb ")
	}
	_, err := os.Stat("/sys/fs/cgroup/hugetlb")
	return err != nil
}

// dropHugetlb removes linux.resources.hugepageLimits from a bundle's
// config.json document; it reports whether it changed doc.
func dropHugetlb(doc map[string]json.RawMessage) (bool, error) {
	var linux map[string]json.RawMessage
	if doc["linux"] == nil || json.Unmarshal(doc["linux"], &linux) != nil || linux["resources"] == nil {
		return false, nil
	}
	var res map[string]json.RawMessage
	if json.Unmarshal(linux["resources"], &res) != nil || res["hugepageLimits"] == nil {
		return false, nil
	}
	delete(res, "hugepageLimits")
	var err error
	if linux["resources"], err = json.Marshal(res); err != nil {
		return false, err
	}
	doc["linux"], err = json.Marshal(linux)
	return err == nil, err
}

// clamp raises the file's oomScoreAdj to own when it is lower and, with
// noHugetlb, drops a bundle's hugepage limits, keeping every other field
// as it is.
func clamp(path string, process bool, own int, noHugetlb bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	changed := false
	if !process && noHugetlb {
		if changed, err = dropHugetlb(doc); err != nil {
			return fmt.Errorf("%s: linux: %w", path, err)
		}
	}
	proc := doc
	if !process && doc["process"] != nil {
		if err := json.Unmarshal(doc["process"], &proc); err != nil {
			return fmt.Errorf("%s: process: %w", path, err)
		}
	}
	var adj int
	if (process || doc["process"] != nil) && proc["oomScoreAdj"] != nil && json.Unmarshal(proc["oomScoreAdj"], &adj) == nil && adj < own {
		proc["oomScoreAdj"] = json.RawMessage(strconv.Itoa(own))
		if !process {
			if doc["process"], err = json.Marshal(proc); err != nil {
				return err
			}
		}
		changed = true
	}
	if !changed {
		return nil
	}
	if b, err = json.Marshal(doc); err != nil {
		return err
	}
	tmp := path + ".clamp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
