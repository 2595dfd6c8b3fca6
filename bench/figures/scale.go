package figures

// ScaleFile holds Scale records (make bench-scale).
const ScaleFile = "scale.jsonl"

// Scale is one run of the scale simulation at Nodes simulated nodes: the
// control plane's load under netdra's real dra code and operator
// (shared/testinfra/testworld/scale).
type Scale struct {
	Nodes     int    `json:"nodes"`
	Inventory string `json:"inventory"` // what each node publishes
	Shared    string `json:"shared"`    // what the simulated nodes share
	Cores     int    `json:"cores"`     // the machine's CPUs (runtime.NumCPU)
	// StartupS is from the ClusterConfig's creation until every node's
	// NodeConfig is applied and its slices published.
	StartupS float64 `json:"startupS"`
	// RestWindowS is how long writes at rest were counted.
	RestWindowS float64 `json:"restWindowS"`
	// RestWrites are the apiserver's writes during the window, by
	// resource (resource or resource/subresource) and verb ("resource
	// VERB"), with netdra; BaselineWrites the same in an equal window of
	// the same cluster before dra started (Nodes, no dra).
	RestWrites     map[string]float64 `json:"restWrites"`
	BaselineWrites map[string]float64 `json:"baselineWrites"`
	// WritesPerNodeHour is the netdra window's writes less the baseline's,
	// per node and per hour, by resource.
	WritesPerNodeHour map[string]float64 `json:"writesPerNodeHour"`
	// WritesPerNodeHourAfterChange is the same over a second window (half
	// as long) after the ClusterConfig change, with address pools in the
	// NodeConfigs (dra then checks their use periodically).
	WritesPerNodeHourAfterChange map[string]float64 `json:"writesPerNodeHourAfterChange"`
	// Watches are the apiserver's open watches by resource
	// (apiserver_longrunning_requests) with netdra and in the baseline.
	Watches         map[string]float64 `json:"watches"`
	BaselineWatches map[string]float64 `json:"baselineWatches"`
	// StartupRequests are the apiserver's requests while the nodes
	// started (dra's lists and writes), by "resource VERB".
	StartupRequests map[string]float64 `json:"startupRequests"`
	// Change is the ClusterConfig change: until every NodeConfig is
	// applied (dra's Applied condition at its generation) and until every
	// node's slices hold the new pool, P50 and max over the nodes.
	ChangeWhat         string  `json:"changeWhat"`
	ChangeWrittenP50S  float64 `json:"changeWrittenP50S"` // the operator's NodeConfig writes
	ChangeWrittenMaxS  float64 `json:"changeWrittenMaxS"`
	ChangeAppliedP50S  float64 `json:"changeAppliedP50S"`
	ChangeAppliedMaxS  float64 `json:"changeAppliedMaxS"`
	ChangeSlicesP50S   float64 `json:"changeSlicesP50S"`
	ChangeSlicesMaxS   float64 `json:"changeSlicesMaxS"`
	ChangeNodesMissing int     `json:"changeNodesMissing"`
	// ChangeWrites are the apiserver's writes from the change until every
	// node applied and republished it, per node, by "resource VERB".
	ChangeWrites map[string]float64 `json:"changeWrites,omitempty"`
	// ChangeCPCPUS and ChangeSimCPUS are the CPU seconds the control
	// plane's process and the simulation's used over the change.
	ChangeCPCPUS  float64 `json:"changeCpCpuS"`
	ChangeSimCPUS float64 `json:"changeSimCpuS"`
	// ChangeSliceWrites are the ResourceSlice creates and deletes the
	// apiserver served over the change, ChangeSliceWriteS their mean time
	// in it and ChangeSliceEtcdS their mean time waiting on etcd (its
	// etcd_request_duration_seconds of ResourceSlices, per write).
	ChangeSliceWrites float64 `json:"changeSliceWrites,omitempty"`
	ChangeSliceWriteS float64 `json:"changeSliceWriteS,omitempty"`
	ChangeSliceEtcdS  float64 `json:"changeSliceEtcdS,omitempty"`
	// The operator's client over the change: its requests, the seconds
	// they spent in flight and waiting for its rate limiter (summed over
	// the requests).
	OperatorChangeRequests  float64 `json:"operatorChangeRequests"`
	OperatorChangeRequestS  float64 `json:"operatorChangeRequestS"`
	OperatorChangeRateWaitS float64 `json:"operatorChangeRateWaitS"`
	// OperatorExits counts the operator's exits (it is started again, as
	// its Deployment would); OperatorExit is what the first said.
	OperatorExits int    `json:"operatorExits"`
	OperatorExit  string `json:"operatorExit,omitempty"`
	// Operator: CPU seconds over the rest window and over the change,
	// RSS at the end and peak (VmHWM), MiB.
	OperatorRestCPUS   float64 `json:"operatorRestCpuS"`
	OperatorChangeCPUS float64 `json:"operatorChangeCpuS"`
	OperatorRSSMiB     float64 `json:"operatorRssMiB"`
	OperatorPeakMiB    float64 `json:"operatorPeakMiB"`
	// Scheduling: pods per second, from the first pod created to the last
	// bound, by kind ("no claim", "1 VF claim", ...), and how many pods.
	SchedPods       int                `json:"schedPods"`
	SchedPodsPerSec map[string]float64 `json:"schedPodsPerSec"`
	SchedNote       string             `json:"schedNote,omitempty"`
	// SchedRateWaitS are the seconds the control plane's in-process
	// clients (the controller-manager's and the scheduler's) waited for
	// their rate limiters during each kind, summed over their requests;
	// SchedComponentQPS the client rate of the kinds measured again with
	// limits raised (their names end in " (limits raised)").
	SchedRateWaitS    map[string]float64 `json:"schedRateWaitS,omitempty"`
	SchedComponentQPS float64            `json:"schedComponentQps,omitempty"`
	// SchedCPCPUS and SchedSimCPUS are the CPU seconds the control
	// plane's process and the simulation's used during each kind.
	SchedCPCPUS  map[string]float64 `json:"schedCpCpuS,omitempty"`
	SchedSimCPUS map[string]float64 `json:"schedSimCpuS,omitempty"`
	// Etcd: its database size in use, with the Nodes only and with
	// netdra at rest (before the pods), bytes; objects by resource.
	EtcdBaselineBytes float64            `json:"etcdBaselineBytes"`
	EtcdBytes         float64            `json:"etcdBytes"`
	EtcdObjects       map[string]float64 `json:"etcdObjects"`
	// The control plane process (etcd, apiserver, controller-manager,
	// scheduler in one process): RSS with the Nodes only and with netdra
	// at rest, MiB; the Go heap in use of that process, MiB.
	CPBaselineRSSMiB float64 `json:"cpBaselineRssMiB"`
	CPRSSMiB         float64 `json:"cpRssMiB"`
	CPHeapMiB        float64 `json:"cpHeapMiB"`
	// The simulation's own process (every simulated node's dra): RSS, MiB,
	// and CPU seconds over the rest window.
	SimRSSMiB   float64 `json:"simRssMiB"`
	SimRestCPUS float64 `json:"simRestCpuS"`
	// Load is the machine's 1-minute load average at the start and end.
	Load    string  `json:"load"`
	TotalS  float64 `json:"totalS"`
	Failure string  `json:"failure,omitempty"` // what broke, when the run did not finish
}
