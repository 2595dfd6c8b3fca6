package ebpf

import (
	"errors"

	"github.com/cilium/ebpf"
)

// ErrNotAttached is returned for a device with none of netdra's programs.
var ErrNotAttached = errors.New("netdra's eBPF programs are not attached")

// ErrNotBPFFS is returned when the pin root is on a file system that is
// not a bpffs and cannot be made one.
var ErrNotBPFFS = errors.New("not a bpf file system")

// ErrNotSupported is what a kernel that lacks a feature (tcx before Linux
// 6.6) fails with; it is cilium/ebpf's, so that callers need not import
// it.
var ErrNotSupported = ebpf.ErrNotSupported
