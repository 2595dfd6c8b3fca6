package realnode

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runtimeMonitors are the programs a runtime leaves beside each container
// (CRI-O's conmon, containerd's shim): they outlive the runtime by design.
var runtimeMonitors = map[string]bool{"conmon": true, "containerd-shim-runc-v2": true}

// killStragglers kills what of the node's runtime outlived it: each
// container monitor whose command line names the node's folder dir (a
// runtime killed while it started a container forgets it, and its sandbox
// removal then misses it) and every process under one (the container's
// init, which would otherwise wait for its start forever). It returns the
// command lines it killed. Called once the runtime has stopped.
func killStragglers(dir string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	var roots []int
	cmdlines := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		parent[pid] = ppid
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		cmdlines[pid] = strings.Join(args, " ")
		if runtimeMonitors[filepath.Base(args[0])] && strings.Contains(cmdlines[pid], dir+"/") {
			roots = append(roots, pid)
		}
	}
	kill := map[int]bool{}
	for _, r := range roots {
		kill[r] = true
	}
	// Descendants, to a fixed point: parent links may come in any order.
	for grew := true; grew; {
		grew = false
		for pid, ppid := range parent {
			if !kill[pid] && kill[ppid] {
				kill[pid], grew = true, true
			}
		}
	}
	var killed []string
	for pid := range kill {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, cmdlines[pid])
		}
	}
	return killed
}
