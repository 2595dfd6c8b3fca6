// Package netnscheck is netdra's second gate, for when nri is not there to
// be the first: an OCI createRuntime hook, put on each netdra device's CDI
// device by dra, that the runtime (runc) runs as it creates a container
// that uses the claim, after the container's namespaces exist and before
// its program starts. It fails the container's creation unless every
// named interface is in the container's network namespace; the kubelet
// then retries the creation, and the container starts with its devices
// once nri is back and has attached them.
//
// nri's CreateContainer gate does the same when nri is connected; the
// runtime lets containers start without asking a plugin that is away, and
// this hook runs whatever nri's state. It reads the container's netns
// through /proc/<pid>/net/dev (the hook runs in the runtime's namespaces,
// as root), so it needs no setns and no netlink.
package netnscheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultWait is how long the hook waits for an interface by default,
// just under the hook's CDI timeout (dra's cdispec.HookTimeout, 30 s): nri
// attaches a pod's devices beside the runtime, after RunPodSandbox
// returned, so a container may be created before they are in (in a burst
// of pods, seconds before); an nri that is away does not attach them
// within it, and the kubelet retries the creation.
const DefaultWait = 29 * time.Second

// Check is one run of the hook.
type Check struct {
	// IfNames must all be in the container's network namespace.
	IfNames []string
	// ProcRoot is /proc, or a fake one in tests.
	ProcRoot string
	// Wait is how long an interface may take to appear (an attach still
	// under way) before the creation fails.
	Wait time.Duration
}

// state is the part of the OCI runtime state (on the hook's stdin) the
// check reads.
type state struct {
	ID  string `json:"id"`
	Pid int    `json:"pid"`
}

// Run reads the OCI state from stdin and checks the container's netns. The
// error says which interface is missing and why that fails the container.
func (c Check) Run(stdin io.Reader) error {
	var st state
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("reading the OCI state on stdin: %w", err)
	}
	if st.Pid <= 0 {
		return fmt.Errorf("the OCI state names no container process (pid %d)", st.Pid)
	}
	deadline := time.Now().Add(c.Wait)
	pause := firstPause
	for {
		missing, err := c.missing(st.Pid)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netdra: %s not in the network namespace of container %s after %s: netdra's nri plugin has not attached the pod's devices "+
				"(its attach failed, and the kubelet's next try of this container says why, as does nri's log; or nri is not running); the container is not started without them",
				strings.Join(missing, ", "), st.ID, c.Wait)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

// The check looks again after firstPause, then after pauses that double up
// to maxPause. A container waits until the first look after its devices
// are in, so the pauses start short: a long fixed pause would be added to
// the start of nearly every pod whose containers are created while its
// attach runs. A look reads one small /proc file, so looking often is cheap.
const (
	firstPause = time.Millisecond
	maxPause   = 10 * time.Millisecond
)

// missing lists the interfaces of c.IfNames not in pid's netns.
func (c Check) missing(pid int) ([]string, error) {
	have, err := interfaces(filepath.Join(c.ProcRoot, strconv.Itoa(pid), "net", "dev"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range c.IfNames {
		if !slices.Contains(have, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// interfaces reads the interface names of a /proc/<pid>/net/dev file: two
// header lines, then "name: counters..." per interface.
func interfaces(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the container's interfaces: %w", err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		if name, _, ok := strings.Cut(sc.Text(), ":"); ok && line >= 2 {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return names, nil
}
