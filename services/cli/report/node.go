// Package report is what kubectl netdra shows: a node's processes, devices
// and address pools, the nodes low on addresses, the claims that failed,
// built from what the node's processes and the cluster report (no I/O
// here), and written as a table or JSON.
package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	resourceapi "k8s.io/api/resource/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/process"
)

// Processes are the node pod's processes, in the order shown.
var Processes = []string{"provisioner", "state", "dra", "nri"}

// The device states a node's view shows: an allocation's phase, or free
// (published or not, no claim holds it), or lost (an allocation, not in a
// pod, whose device its manager no longer reports: a device in a pod's
// network namespace is out of the host's sight, and not lost).
const (
	StateFree          = "free"
	StatePreparing     = "preparing"
	StatePrepared      = "prepared"
	StateAttached      = "attached"
	StateFreeingFailed = "freeing-failed"
	StateLost          = "lost"
)

// Node is a node's view.
type Node struct {
	Name string `json:"name"`
	// Pod is the netdra pod read (namespace/name); empty when the sockets
	// were read directly.
	Pod       string    `json:"pod,omitempty"`
	Driver    string    `json:"driver,omitempty"`
	Processes []Process `json:"processes"`
	Devices   []Device  `json:"devices"`
	IPPools   []IPPool  `json:"ipPools"`
	// Problems are what could not be read, and why.
	Problems []string `json:"problems,omitempty"`
}

// Process is one of the node's processes.
type Process struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	// Version is the binary's; empty when unknown (sockets read directly).
	Version string `json:"version,omitempty"`
	// Image, Ready and Restarts are its container's, when read from a pod.
	Image    string `json:"image,omitempty"`
	ImageID  string `json:"imageID,omitempty"`
	Ready    *bool  `json:"ready,omitempty"`
	Restarts int32  `json:"restarts"`
	// Detail is the process's own account (dra: registration and what it
	// waits for; nri: its runtime connection; state: its tables).
	Detail string `json:"detail,omitempty"`
	// Error is why it is not healthy or could not be read.
	Error string `json:"error,omitempty"`
}

// Container is what the cluster says of a process's container.
type Container struct {
	Image, ImageID string
	Ready          bool
	Restarts       int32
}

// Device is one device of the node and who holds it.
type Device struct {
	Name      string `json:"name"`
	Pool      string `json:"pool,omitempty"`
	Manager   string `json:"manager,omitempty"`
	Interface string `json:"interface,omitempty"`
	Link      string `json:"link,omitempty"`
	// Published says a ResourceSlice of the node offers it.
	Published bool `json:"published"`
	// Taints are its taints in the slice, key=value:effect.
	Taints  []string `json:"taints,omitempty"`
	State   string   `json:"state"`
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is an allocation of a device: the claim, its pod, where it is.
type Holder struct {
	ClaimNamespace string `json:"claimNamespace"`
	ClaimName      string `json:"claimName"`
	ClaimUID       string `json:"claimUID"`
	// Pod is namespace/name of the pod the claim is reserved for, when the
	// cluster still has it; PodUID is the state service's record.
	Pod       string   `json:"pod,omitempty"`
	PodUID    string   `json:"podUID,omitempty"`
	Phase     string   `json:"phase"`
	Attached  bool     `json:"attached"`
	Netns     string   `json:"netns,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	LastError string   `json:"lastError,omitempty"`
}

// IPPool is a node-local address pool and its use.
type IPPool struct {
	Name       string `json:"name"`
	Subnet     string `json:"subnet"`
	Size       string `json:"size"`
	Used       uint32 `json:"used"`
	Free       string `json:"free"`
	Retired    bool   `json:"retired,omitempty"`
	OutOfRange uint32 `json:"outOfRange,omitempty"`
}

// NodeInput is what a node's view is built from.
type NodeInput struct {
	Name, Pod, Driver string
	// Reports are the processes' inspect reports by process name; a
	// process missing here is one that could not be read, ReadErrors
	// says why.
	Reports    map[string]process.Report
	ReadErrors map[string]error
	// Containers are the processes' containers by name (none when the
	// sockets were read directly).
	Containers map[string]Container
	// Slices are the driver's ResourceSlices of the node.
	Slices []resourceapi.ResourceSlice
	// Pods maps a pod UID to namespace/name, for the claims' pods.
	Pods map[string]string
	// Problems are what the caller could not read.
	Problems []string
}

// BuildNode joins the processes' reports with the cluster's view.
func BuildNode(in NodeInput) Node {
	n := Node{Name: in.Name, Pod: in.Pod, Driver: in.Driver, Problems: slices.Clone(in.Problems)}
	var dump statev1.DumpResponse
	for _, name := range Processes {
		p, problem := buildProcess(name, in, &dump)
		n.Processes = append(n.Processes, p)
		if problem != "" {
			n.Problems = append(n.Problems, problem)
		}
	}
	n.Devices = buildDevices(&dump, in.Slices, in.Pods)
	for _, p := range dump.GetIpPools() {
		n.IPPools = append(n.IPPools, IPPool{Name: p.GetPool().GetName(), Subnet: p.GetPool().GetSubnet(),
			Size: p.GetSize(), Used: p.GetUsed(), Free: p.GetFree(), Retired: p.GetRetired(), OutOfRange: p.GetOutOfRange()})
	}
	slices.SortFunc(n.IPPools, func(a, b IPPool) int { return cmp.Compare(a.Name, b.Name) })
	return n
}

// unmarshal reads a report's status leniently: a process of another
// release may know fields this one does not.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// buildProcess is one process's row; the state service's tables go to
// dump. problem says what could not be read.
func buildProcess(name string, in NodeInput, dump *statev1.DumpResponse) (p Process, problem string) {
	p = Process{Name: name}
	if c, ok := in.Containers[name]; ok {
		p.Image, p.ImageID, p.Ready, p.Restarts = c.Image, c.ImageID, &c.Ready, c.Restarts
	}
	r, ok := in.Reports[name]
	if !ok {
		err := in.ReadErrors[name]
		if err == nil {
			err = fmt.Errorf("not read")
		}
		p.Error = err.Error()
		return p, fmt.Sprintf("%s: %v", name, err)
	}
	p.Healthy, p.Version, p.Error = r.Healthy, r.Version, cmp.Or(r.HealthError, r.StatusError)
	if len(r.Status) == 0 {
		if r.StatusError != "" {
			problem = fmt.Sprintf("%s: %s", name, r.StatusError)
		}
		return p, problem
	}
	var err error
	switch name {
	case "state":
		if err = unmarshal.Unmarshal(r.Status, dump); err == nil {
			p.Detail = fmt.Sprintf("%d devices, %d allocations, %d address pools", len(dump.GetDevices()), len(dump.GetAllocations()), len(dump.GetIpPools()))
		}
	case "dra":
		var s drav1.StatusResponse
		if err = unmarshal.Unmarshal(r.Status, &s); err == nil {
			p.Detail = draDetail(&s)
		}
	case "nri":
		var s nriv1.StatusResponse
		if err = unmarshal.Unmarshal(r.Status, &s); err == nil {
			p.Detail = nriDetail(&s)
		}
	}
	if err != nil {
		problem = fmt.Sprintf("%s: its status: %v", name, err)
	}
	return p, problem
}

func draDetail(s *drav1.StatusResponse) string {
	var parts []string
	if s.GetRegistered() {
		parts = append(parts, "registered as "+s.GetDriverName())
	} else {
		parts = append(parts, "not registered"+suffix(": ", s.GetRegistrationError()))
	}
	devices := 0
	for _, p := range s.GetPools() {
		devices += int(p.GetDevices())
	}
	parts = append(parts, fmt.Sprintf("config generation %d", s.GetConfigGeneration()),
		fmt.Sprintf("%d pools, %d devices published", len(s.GetPools()), devices))
	if w := s.GetWaitingFor(); len(w) > 0 {
		parts = append(parts, "waiting for: "+strings.Join(w, "; "))
	}
	return strings.Join(parts, ", ")
}

func nriDetail(s *nriv1.StatusResponse) string {
	parts := []string{"runtime not connected"}
	if s.GetConnected() {
		parts[0] = "runtime connected"
	}
	parts = append(parts, fmt.Sprintf("%d pods", len(s.GetPods())))
	for _, p := range s.GetPods() {
		if a := p.GetAttach(); strings.HasPrefix(a, "failed") {
			parts = append(parts, "pod "+p.GetUid()+" attach "+a)
		}
	}
	if w := s.GetWaitingFor(); len(w) > 0 {
		parts = append(parts, "waiting for: "+strings.Join(w, "; "))
	}
	return strings.Join(parts, ", ")
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// buildDevices joins the inventory, the allocations and the slices: a
// row per device the manager reports or an allocation holds (described as
// prepared when the manager no longer sees it; lost unless it is in a
// pod). The pool is netdra's (the devices' pool attribute), else the
// slice's.
func buildDevices(dump *statev1.DumpResponse, slices_ []resourceapi.ResourceSlice, pods map[string]string) []Device {
	published := map[string]resourceapi.Device{}
	pools := map[string]string{}
	for _, s := range slices_ {
		for _, d := range s.Spec.Devices {
			published[d.Name] = d
			pools[d.Name] = s.Spec.Pool.Name
			if a, ok := d.Attributes["pool"]; ok && a.StringValue != nil {
				pools[d.Name] = *a.StringValue
			}
		}
	}
	byName := map[string]*Device{}
	unseen := map[string]bool{}
	var out []*Device
	for _, d := range dump.GetDevices() {
		dev := &Device{Name: d.GetName(), Manager: managerName(d.GetManager()), Interface: d.GetKernelIfName(),
			Link: linkName(d.GetLinkState()), State: StateFree}
		byName[dev.Name] = dev
		out = append(out, dev)
	}
	for _, a := range dump.GetAllocations() {
		dev, ok := byName[a.GetDeviceName()]
		if !ok {
			pd := a.GetPreparedDevice().GetDevice()
			dev = &Device{Name: a.GetDeviceName(), Manager: managerName(a.GetManager()), Interface: pd.GetKernelIfName(), State: StateFree}
			byName[dev.Name] = dev
			out = append(out, dev)
			unseen[dev.Name] = true
		}
		h := Holder{ClaimNamespace: a.GetClaimNamespace(), ClaimName: a.GetClaimName(), ClaimUID: a.GetClaimUid(),
			PodUID: a.GetPodUid(), Pod: pods[a.GetPodUid()], Phase: phaseName(a.GetPhase()),
			Attached: a.GetPhase() == statev1.Phase_PHASE_ATTACHED, Netns: a.GetNetnsPath(),
			Addresses: a.GetPoolAddresses(), LastError: a.GetLastError()}
		dev.Holders = append(dev.Holders, h)
		if dev.Pool == "" {
			dev.Pool = a.GetPool()
		}
		dev.State = worse(dev.State, h.Phase)
	}
	for name := range unseen {
		if dev := byName[name]; dev.State != StateAttached {
			dev.State = StateLost
		}
	}
	res := make([]Device, 0, len(out))
	for _, dev := range out {
		if d, ok := published[dev.Name]; ok {
			dev.Published, dev.Pool = true, pools[dev.Name]
			for _, t := range d.Taints {
				dev.Taints = append(dev.Taints, taintString(t))
			}
		}
		res = append(res, *dev)
	}
	slices.SortFunc(res, func(a, b Device) int { return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Name, b.Name)) })
	return res
}

// worse is the state a device with holders in states a and b shows: the
// one that needs a look first (a shared device has several holders).
func worse(a, b string) string {
	rank := map[string]int{StateFree: 0, StateAttached: 1, StatePrepared: 2, StatePreparing: 3, StateFreeingFailed: 4}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func phaseName(p statev1.Phase) string {
	switch p {
	case statev1.Phase_PHASE_PREPARING:
		return StatePreparing
	case statev1.Phase_PHASE_PREPARED:
		return StatePrepared
	case statev1.Phase_PHASE_ATTACHED:
		return StateAttached
	case statev1.Phase_PHASE_FREEING_FAILED:
		return StateFreeingFailed
	}
	return strings.ToLower(p.String())
}

func managerName(m devicev1.DeviceManager) string {
	if m == devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED {
		return ""
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(m.String(), "DEVICE_MANAGER_")), "_", "-")
}

func linkName(s devicev1.LinkState) string {
	if s == devicev1.LinkState_LINK_STATE_UNSPECIFIED {
		return ""
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "LINK_STATE_")), "_", "-")
}

func taintString(t resourceapi.DeviceTaint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

// AllocatedClaims are the claims (namespace, name) the state service's
// report holds allocations of; none when it has no readable status.
func AllocatedClaims(state process.Report) [][2]string {
	var dump statev1.DumpResponse
	if len(state.Status) == 0 || unmarshal.Unmarshal(state.Status, &dump) != nil {
		return nil
	}
	var out [][2]string
	for _, a := range dump.GetAllocations() {
		k := [2]string{a.GetClaimNamespace(), a.GetClaimName()}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
