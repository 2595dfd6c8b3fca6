// Package figures is what netdra's benchmarks measure and how they hand it
// to the report: latency samples summarized as percentiles, and records
// appended as JSON lines to files in the folder $NETDRA_BENCH_OUT, which
// `make bench` sets and bench/cmd/benchreport reads into bench/RESULTS.md.
// Figures are reported, never asserted: nothing here fails on a slow run.
package figures

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OutEnv names the folder the records are written to; unset, Record
// writes nothing (a plain `go test -bench` run).
const OutEnv = "NETDRA_BENCH_OUT"

// Files the benchmarks write, one JSON record a line.
const (
	AttachFile    = "attach.jsonl"    // Attach records
	RSSFile       = "rss.jsonl"       // RSS records
	MovesFile     = "moves.jsonl"     // Moves records
	PrepareFile   = "prepare.jsonl"   // Prepare records
	InventoryFile = "inventory.jsonl" // Inventory records
	DiscoverFile  = "discover.jsonl"  // a Summary of sr-iov discoveries of the same tree
	SubifFile     = "subif.jsonl"     // Subif records (the sub-interface's attach cost)
	SettingsFile  = "settings.jsonl"  // Settings records (the pod network settings' attach cost)
	HooksFile     = "hooks.jsonl"     // Hooks records (the time the NRI hooks hold the runtime's lock)
	PodStartFile  = "podstart.jsonl"  // PodStart records (the real node)
	RestartFile   = "restart.jsonl"   // KubeletRestart records (the real node)
	BesideFile    = "beside.jsonl"    // Beside records (a pod without devices beside 8-device pods)
)

// HookSlowSeconds is the bound of nri's hook duration histogram above
// which Beside.HooksOver counts a call: one of the histogram's buckets
// (services/nri/plugin's hook buckets), the one nearest the hooks' target.
const HookSlowSeconds = 0.0025

// Beside is one phase of benchworld's BenchmarkWorld_PodBesideDevicePods on
// the real node: Plain pods without a netdra claim created at once, in
// Phase "alone" by themselves, "beside-plain" with Extra pods without a
// claim created at the same moment (as many pods, no devices), and
// "beside-devices" with Extra pods each with a claim of Devices netdra
// devices created at the same moment. The phases run in turn Rounds times
// and the samples of a phase are pooled. Ready is the plain pods' time
// from the create request to Ready, RoundP50 their P50 in each round (in
// the order run: how far a phase's rounds spread); ExtraReady and
// ExtraScheduled the extra pods' to Ready and to their binding to the
// node. Hooks is the mean
// time (ms) of nri's hooks and dra's calls ("nri RunPodSandbox", "dra
// prepare", ...) over the phase's starts and teardowns, from their
// metrics; HooksOver the share (0 to 1) of each nri hook's calls that took
// more than HookSlowSeconds.
// Context says what the difference between the phases includes.
type Beside struct {
	Phase          string             `json:"phase"`
	Plain          int                `json:"plain"`
	Extra          int                `json:"extra"`
	Devices        int                `json:"devices"`
	Rounds         int                `json:"rounds"`
	Failures       int                `json:"failures"`
	Ready          Summary            `json:"ready"`
	RoundP50       []float64          `json:"round_p50_ms"`
	ExtraReady     Summary            `json:"extra_ready"`
	ExtraScheduled Summary            `json:"extra_scheduled"`
	WallSeconds    float64            `json:"wall_s"` // the phase's rounds, creation to the last pod Ready
	Hooks          map[string]float64 `json:"hooks_mean_ms,omitempty"`
	HooksOver      map[string]float64 `json:"hooks_over_2_5ms,omitempty"`
	Context        string             `json:"context,omitempty"`
}

// PodStart is one way of starting pods on the real node (benchworld's
// BenchmarkWorld_PodStartup): Way "serial" (each pod created when the one
// before is Ready) or "burst" (all created at once), with a netdra claim
// or without (the same pod spec otherwise); Ready is each pod's time from
// its create request to the first sight of its Ready condition. Hooks is
// the mean time (ms) of netdra's own calls over the phase, from nri's and
// dra's metrics ("nri RunPodSandbox", "dra prepare", ...).
type PodStart struct {
	// Way is "serial" (one after the other), "burst" (all at once) or
	// "burst-raised" (all at once, the control plane's client limits
	// raised).
	Way       string  `json:"way"`
	Claim     bool    `json:"claim"`
	Pods      int     `json:"pods"`
	Failures  int     `json:"failures"`
	Ready     Summary `json:"ready"`
	Scheduled Summary `json:"scheduled"` // create request to bound to the node
	// The runtime's stages, from the create request, by the times
	// containerd reports through the CRI (this host's clock): the pod's
	// sandbox begun (the kubelet has seen the pod and prepared its
	// claims), its container made (the sandbox up, its network and NRI's
	// RunPodSandbox done) and started (runc's create, its OCI hooks
	// included, and start done).
	Sandbox          Summary            `json:"sandbox_created"`
	ContainerCreated Summary            `json:"container_created"`
	ContainerStarted Summary            `json:"container_started"`
	WallSeconds      float64            `json:"wall_s"`
	Hooks            map[string]float64 `json:"hooks_mean_ms,omitempty"`
	// ComponentQPS is the controller-manager's and the scheduler's
	// apiserver client rate the phase ran with; zero: their defaults.
	ComponentQPS float64 `json:"component_qps,omitempty"`
}

// KubeletRestart is the real node's kubelet restarted while netdra runs,
// each time from the old kubelet's SIGTERM: until the Node is seen Ready
// (when the new kubelet started: the Node is still Ready in the API),
// until the node's ResourceSlices are back (the kubelet deletes them at
// start) and until a pod with a claim, created then, is Running (and one
// without a claim, created with it).
type KubeletRestart struct {
	RestartSeconds    float64 `json:"restart_s"`
	SlicesBackSeconds float64 `json:"slices_back_s"`
	PodRunningSeconds float64 `json:"pod_running_s"`
	PodBoundSeconds   float64 `json:"pod_bound_s"` // the pod bound to the node by the scheduler
	// PlainRunningSeconds is a pod without a claim, created with the
	// other: the restarted kubelet's own time to a pod Running.
	PlainRunningSeconds float64 `json:"plain_running_s"`
	SlicesDeleted       bool    `json:"slices_deleted"` // false: the old slices were never seen deleted
}

// Hooks is how long netdra's NRI hooks held the runtime's NRI lock in one
// configuration of the pipeline (devices per pod, concurrent pods), as the
// runtime side measured each call: RunPodSandbox and StopPodSandbox per
// pod, and CreateContainer, which waits for the part of the pod's attach
// that has not ended (every call, retries after a refusal included).
// Refusals counts the CreateContainer calls refused because the attach had
// not ended within the hook's time (the kubelet creates the container
// again; so does the benchmark).
type Hooks struct {
	Devices         int     `json:"devices"`
	Concurrency     int     `json:"concurrency"`
	RunPodSandbox   Summary `json:"run_pod_sandbox"`
	StopPodSandbox  Summary `json:"stop_pod_sandbox"`
	CreateContainer Summary `json:"create_container"`
	Refusals        int     `json:"refusals"`
}

// Subif is one way of giving a pod a link, at the link level
// (services/provisioner/link's BenchmarkAttach_SubifVsMove): "move-veth",
// the kernel's baseline (a veth moved in and back), or "create-macvlan",
// a sub-interface created in the pod and deleted there; the means of N
// attaches and detaches with the same full config, measured in one run.
type Subif struct {
	Way      string  `json:"way"`
	N        int     `json:"n"`
	AttachMs float64 `json:"attach_ms"`
	DetachMs float64 `json:"detach_ms"`
}

// Settings is one group of pod network settings at the link level
// (services/provisioner/link's BenchmarkAttach_Settings): "baseline" (the
// name and two addresses), the baseline with one group ("routes",
// "rules", "neighbors", "sysctls", "link-settings", "features"), or "all";
// the means of N attaches and detaches of one veth, measured in one run.
type Settings struct {
	Setting  string  `json:"setting"`
	N        int     `json:"n"`
	AttachMs float64 `json:"attach_ms"`
	DetachMs float64 `json:"detach_ms"`
}

// Summary is a latency distribution: count, p50, p90, p99 and max in ms, and
// the samples themselves (ms, sorted) for the plot.
type Summary struct {
	N       int       `json:"n"`
	P50     float64   `json:"p50_ms"`
	P90     float64   `json:"p90_ms,omitempty"`
	P99     float64   `json:"p99_ms"`
	Max     float64   `json:"max_ms"`
	Samples []float64 `json:"samples_ms,omitempty"`
}

// Summarize sorts the samples and computes the percentiles (nearest rank).
func Summarize(d []time.Duration) Summary {
	ms := make([]float64, len(d))
	for i, x := range d {
		ms[i] = float64(x.Microseconds()) / 1000
	}
	return summarizeMs(ms)
}

// summarizeMs is Summarize of samples in milliseconds (ms is sorted in
// place).
func summarizeMs(ms []float64) Summary {
	slices.Sort(ms)
	s := Summary{N: len(ms), Samples: ms}
	if len(ms) == 0 {
		return s
	}
	s.P50, s.P90, s.P99, s.Max = Percentile(ms, 50), Percentile(ms, 90), Percentile(ms, 99), ms[len(ms)-1]
	return s
}

// Percentile is the nearest-rank p-th percentile of sorted samples.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// Attach is one configuration of the attach benchmark: a mode
// ("baseline" or "pipeline"), devices per pod, concurrent pods.
type Attach struct {
	Mode         string  `json:"mode"`
	Devices      int     `json:"devices"`
	Concurrency  int     `json:"concurrency"`
	Pods         int     `json:"pods"` // pod lifecycles measured
	Failures     int     `json:"failures"`
	FirstError   string  `json:"first_error,omitempty"`
	Attach       Summary `json:"attach"`
	Detach       Summary `json:"detach"`
	Moves        int     `json:"moves"`         // moves made: 2 x devices x lifecycles done
	MovesCounted int     `json:"moves_counted"` // moves seen in the host netns's link events (pipeline)
	WallSeconds  float64 `json:"wall_s"`
	MovesPerSec  float64 `json:"moves_per_s"`
}

// Pool is the runs of one mode and configuration taken in turns with
// another mode's (bench's interleaved runs) as one: their samples, moves
// and wall times together, the first error kept.
func Pool(runs []Attach) Attach {
	if len(runs) == 0 {
		return Attach{}
	}
	out := runs[0]
	var attach, detach []float64
	out.Pods, out.Failures, out.Moves, out.WallSeconds = 0, 0, 0, 0
	for _, r := range runs {
		attach = append(attach, r.Attach.Samples...)
		detach = append(detach, r.Detach.Samples...)
		out.Pods += r.Pods
		out.Failures += r.Failures
		out.Moves += r.Moves
		out.WallSeconds += r.WallSeconds
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
	}
	out.Attach, out.Detach = summarizeMs(attach), summarizeMs(detach)
	if out.WallSeconds > 0 {
		out.MovesPerSec = float64(out.Moves) / out.WallSeconds
	}
	return out
}

// RSS is one process's memory in a phase ("idle", "churn").
type RSS struct {
	Process string `json:"process"`
	Phase   string `json:"phase"`
	RSSKiB  int    `json:"rss_kib"` // VmRSS (peak of the samples under churn)
	HWMKiB  int    `json:"hwm_kib"` // VmHWM at the end of the phase
	// RssAnon (the heap's and the stacks' pages) and RssFile (the mapped
	// binary's) at the end of the phase; zero when not read.
	AnonKiB int    `json:"rss_anon_kib,omitempty"`
	FileKiB int    `json:"rss_file_kib,omitempty"`
	Context string `json:"context,omitempty"`
}

// Moves is the namespace moves one pod lifecycle makes with a manager.
type Moves struct {
	Manager string `json:"manager"`
	In      int    `json:"in"`
	Out     int    `json:"out"`
	How     string `json:"how"` // "measured: ..." or "read from the code: ..."
}

// Prepare is the NodePrepareResources of one claim with Devices devices,
// to the claim status in the apiserver.
type Prepare struct {
	Devices int `json:"devices"`
	// Paced: claims were spaced out so that dra's client-side rate limiter
	// (client-go's default 5 QPS, burst 10) had refilled before each.
	Paced     bool    `json:"paced"`
	Prepare   Summary `json:"prepare"`
	Unprepare Summary `json:"unprepare"`
}

// Inventory is the time from devices discovered to every ResourceSlice
// published.
type Inventory struct {
	Devices      int       `json:"devices"`
	Seconds      float64   `json:"seconds"`   // the median of RoundsMs
	RoundsMs     []float64 `json:"rounds_ms"` // each round's time
	Slices       int       `json:"slices"`
	BodyBytes    float64   `json:"body_bytes"`    // apiserver_request_body_size_bytes_sum, resourceslices writes
	Requests     float64   `json:"requests"`      // their count
	ObjectsBytes int       `json:"objects_bytes"` // size of the slices as JSON, read back
	How          string    `json:"how"`
}

var mu sync.Mutex

// Record appends v as one JSON line to file in $NETDRA_BENCH_OUT, when set.
func Record(file string, v any) error {
	dir := os.Getenv(OutEnv)
	if dir == "" {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Read decodes every record of file in dir; a missing file is no records.
func Read[T any](dir, file string) ([]T, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []T
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", file, i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// ProcStatus reads VmRSS and VmHWM (KiB) of a process from /proc.
func ProcStatus(pid int) (rss, hwm int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.Atoi(f[1])
		case "VmHWM:":
			hwm, _ = strconv.Atoi(f[1])
		}
	}
	return rss, hwm, nil
}

// FindPID returns the process whose command line holds every one of args,
// e.g. "-socket" and a socket path unique to one process.
func FindPID(args ...string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.Split(string(b), "\x00")
		if holdsAll(cmd, args) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process with arguments %q", args)
}

func holdsAll(cmd, args []string) bool {
	for _, a := range args {
		if !slices.Contains(cmd, a) {
			return false
		}
	}
	return true
}

// Sampler samples the VmRSS of processes every interval until Stop, keeping
// the peak of each.
type Sampler struct {
	pids  map[string]int
	peak  map[string]int
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	every time.Duration
}

// NewSampler starts sampling pids (process name -> pid).
func NewSampler(pids map[string]int, every time.Duration) *Sampler {
	s := &Sampler{pids: pids, peak: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{}), every: every}
	go s.run()
	return s
}

func (s *Sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *Sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, pid := range s.pids {
		if rss, _, err := ProcStatus(pid); err == nil && rss > s.peak[name] {
			s.peak[name] = rss
		}
	}
}

// Stop ends the sampling and returns the peak VmRSS (KiB) of each process.
func (s *Sampler) Stop() map[string]int {
	close(s.stop)
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.peak)
}
