// check-netns, Check, is netdra's OCI createRuntime hook on each netdra
// device's CDI device, which dra puts there: the runtime (runc) runs it as
// it creates a container that uses the claim, after the container's
// namespaces exist and before its program starts. With nri's gate socket
// (Check.Socket), it first asks nri's gate (package gatehook) to wait
// until the pod's devices are attached, and refuses the container with
// nri's reason, or when nri is not running (fail-closed); then, whatever
// the gate said, it fails the container's creation unless every named
// interface is in the container's network namespace. The kubelet retries
// a refused creation, and the container starts with its devices once nri
// has attached them.
//
// It reads the container's netns through /proc/<pid>/net/dev (the hook
// runs in the runtime's namespaces, as root), so it needs no setns and no
// netlink, and the pod's UID from the OCI state's annotations.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/netdra/netdra/services/nri/gatehook"
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
	// Wait is how long the check may take (the gate's wait, then an
	// interface that may take to appear) before the creation fails.
	Wait time.Duration
	// Socket is nri's gate socket, asked first; empty: none.
	Socket string
}

// PodUIDAnnotations are the OCI annotations that may carry the pod's UID,
// in the order they are read: containerd's, then the kubelet's label as
// runtimes that copy the labels into annotations name it.
var PodUIDAnnotations = []string{"io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"}

// state is the part of the OCI runtime state (on the hook's stdin) the
// check reads.
type state struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Annotations map[string]string `json:"annotations"`
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
	if c.Socket != "" {
		if err := c.gate(st); err != nil {
			return err
		}
	}
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

// gate asks nri's gate for the pod of st, within c.Wait. The error is the
// refusal: nri's reason, or that nri is not running, naming the
// interfaces not there yet.
func (c Check) gate(st state) error {
	var uid string
	for _, a := range PodUIDAnnotations {
		if uid = st.Annotations[a]; uid != "" {
			break
		}
	}
	if uid == "" {
		return fmt.Errorf("netdra: the OCI state of container %s names no pod (no annotation %s): the container is not started without word from netdra's nri plugin that its pod's devices are attached",
			st.ID, strings.Join(PodUIDAnnotations, " or "))
	}
	err := gatehook.Ask(context.Background(), c.Socket, gatehook.Request{PodUID: uid}, c.Wait)
	if err == nil || !errors.Is(err, gatehook.ErrNotRunning) {
		return err
	}
	down := errors.Unwrap(err) // "netdra's nri plugin is not running (...)"
	if missing, merr := c.missing(st.Pid); merr == nil && len(missing) > 0 {
		return fmt.Errorf("netdra: %s not in the network namespace of container %s, and %w: the container is not started without its pod's devices",
			strings.Join(missing, ", "), st.ID, down)
	}
	return fmt.Errorf("netdra: container %s of pod %s refused: %w: the container is not started without its word that the pod's devices are attached", st.ID, uid, down)
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
