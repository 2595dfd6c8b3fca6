package driver

import (
	"errors"
	"slices"

	"google.golang.org/grpc/status"

	"github.com/netdra/netdra/services/dra/statusdata"
)

// Sentinel errors of a failed prepare; the claim's error wraps one of them
// (or a *fielderr.Error for a bad config) with the details.
var (
	// ErrNotAllocated: the claim has no allocation.
	ErrNotAllocated = errors.New("claim is not allocated")
	// ErrNotOnePod: the claim is not reserved for exactly one pod.
	ErrNotOnePod = errors.New("a claim with network devices must be reserved for exactly one pod")
	// ErrHostNetwork: the claim's pod uses the host network.
	ErrHostNetwork = errors.New("pod uses the host network; network devices need a pod network namespace")
	// ErrAdminAccess: a result asks for admin access to a device, which a
	// network device handed to one pod cannot give.
	ErrAdminAccess = errors.New("admin access is not supported for network devices")
	// ErrIfNameInUse: two devices of the same pod would get the same
	// interface name.
	ErrIfNameInUse = errors.New("interface name is already used in the pod")
	// ErrUnknownDevice: an allocated device is not in the node's inventory.
	ErrUnknownDevice = errors.New("device is not in the node's inventory")
	// ErrClaimInUse: the claim is prepared for another pod, or with other
	// devices, and must be unprepared first.
	ErrClaimInUse = errors.New("claim is prepared differently")
	// ErrStillFreeing: a device of the claim is still being freed from an
	// earlier use.
	ErrStillFreeing = errors.New("device is still being freed")
	// ErrBadStatusData: a claim status entry's data is not in the
	// StatusData format, or describes a device this node would not have
	// prepared for the claim (see Driver.Recover).
	ErrBadStatusData = statusdata.ErrBad
	// errWrongPod: the pod the claim is reserved for is another now.
	errWrongPod = errors.New("the claim's pod was replaced")
)

// Event reasons.
const (
	// ReasonPrepareFailed is the reason of the Warning event recorded on a
	// claim whose prepare failed; the message is the error.
	ReasonPrepareFailed = "PrepareFailed"
	// ReasonRecoveryRefused is the reason of the Warning event recorded on
	// a claim whose status a restarted dra did not restore (data that
	// fails its checks); the message says why.
	ReasonRecoveryRefused = "RecoveryRefused"
	// ReasonDeviceLost is the reason of the Warning event recorded on a
	// claim whose device Free found lost at unprepare: its link went with
	// a pod netns the runtime tore down while netdra held no handle on it.
	ReasonDeviceLost = "DeviceLost"
	// ReasonStatusNotWritten is the reason of the Warning event recorded
	// on a prepared claim whose status dra could not write after the
	// prepare; the message is the last error. dra's next start writes it.
	ReasonStatusNotWritten = "StatusNotWritten"
)

// rpcError is an error of a call to another netdra service: it prints the
// operation and the status message without gRPC's "rpc error: code = ..."
// prefix, and unwraps to the original so status.Code still works.
type rpcError struct {
	op  string
	err error
}

func (e *rpcError) Error() string { return e.op + ": " + status.Convert(e.err).Message() }
func (e *rpcError) Unwrap() error { return e.err }

// callErr wraps err of the call op, or returns nil.
func callErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &rpcError{op: op, err: err}
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
