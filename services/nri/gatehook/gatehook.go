// Package gatehook is the hook's side of nri's gate: the call the OCI
// createRuntime hook `netdra-hook wait-attached` makes to nri's
// WaitAttached, on the gate socket, for a container whose pod's attach
// still ran at CreateContainer (nri's plugin.Gate puts the hook there).
// It links no gRPC runtime (package minigrpc) so that the hook starts in
// about the time of an empty Go program: runc runs it on every such
// container's creation.
package gatehook

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/netdra/netdra/shared/rpc/minigrpc"
)

// HookTimeout is the gate hook's OCI timeout, in seconds: the runtime
// kills the hook after it, and the container's creation fails. The hook's
// own wait (-wait) ends a second before, with the reason. It is long
// enough for a burst of pods started at once: the kernel moves their links
// one at a time (RTNL), so the last pod's devices come in well after its
// container is created; the wait holds only that container's creation.
const HookTimeout = 30

// method is NriService's WaitAttached (protos/netdra/nri/v1/nri.proto).
const method = "/netdra.nri.v1.NriService/WaitAttached"

// WaitAttached asks nri's WaitAttached on the gate socket whether the
// pod's devices are all in its netns, for at most wait; a plugin that is
// not listening (restarting) is waited for. nil means they are; the error
// is otherwise the plugin's reason, or that it did not answer in time,
// for the runtime to report as the container's creation error.
func WaitAttached(ctx context.Context, socket, podUID, netnsPath string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := minigrpc.Call(ctx, socket, method, marshalRequest(podUID, netnsPath))
	if err == nil {
		return nil
	}
	if st, ok := errors.AsType[*minigrpc.Status](err); ok && st.Message != "" && ctx.Err() == nil {
		return errors.New(st.Message)
	}
	return fmt.Errorf("netdra: the container is not started without its pod's devices: netdra's nri plugin (%s) did not say they are attached within %s: %w", socket, wait, err)
}

// marshalRequest is the protobuf encoding of nriv1.WaitAttachedRequest
// {pod_uid: 1, netns_path: 2}, written by hand: the generated package
// links the protobuf runtime and grpc.
func marshalRequest(podUID, netnsPath string) []byte {
	return appendString(appendString(nil, 1, podUID), 2, netnsPath)
}

// appendString appends a proto3 string field (omitted when empty).
func appendString(b []byte, field uint64, s string) []byte {
	if s == "" {
		return b
	}
	b = binary.AppendUvarint(b, field<<3|2) // wire type 2: length-delimited
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
