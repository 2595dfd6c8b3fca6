package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// CallWaitAttached is the gate hook's call: WaitAttached on the plugin's
// gate socket, for at most wait. The call waits for a plugin that
// restarts (rpc.Dial's WaitForReady). The error is the plugin's reason,
// for the runtime to report as the container's creation error.
func CallWaitAttached(ctx context.Context, socket string, req *nriv1.WaitAttachedRequest, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conn, err := rpc.Dial(socket)
	if err != nil {
		return fmt.Errorf("netdra: the pod's devices are not known attached: %w", err)
	}
	defer conn.Close()
	_, err = nriv1.NewNriServiceClient(conn).WaitAttached(ctx, req)
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Message() != "" && ctx.Err() == nil {
		return errors.New(st.Message())
	}
	return fmt.Errorf("netdra: the container is not started without its pod's devices: netdra's nri plugin (%s) did not say they are attached within %s: %w", socket, wait, err)
}
