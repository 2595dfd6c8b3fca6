package command

import (
	"context"
	"sync"

	"github.com/spf13/cobra"

	"github.com/netdra/netdra/services/cli/cluster"
	"github.com/netdra/netdra/services/cli/local"
	"github.com/netdra/netdra/services/cli/report"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/process"
)

// inspector reads one of a node's processes: cluster.Exec through the
// node pod, local.Sockets through their sockets on this host.
type inspector interface {
	// Inspect returns the process's report; an error means none.
	Inspect(ctx context.Context, name string) (process.Report, error)
}

var (
	_ inspector = (*cluster.Exec)(nil)
	_ inspector = local.Sockets{}
)

func (o *options) nodeCommand() *cobra.Command {
	var socketDir string
	cmd := &cobra.Command{
		Use:   "node NODE",
		Short: "A node's devices and who holds them, its address pools, its processes' health and versions",
		Long: `A node's devices with their state (free, preparing, prepared, attached,
freeing-failed, lost: allocated but no longer reported by its manager),
whether its ResourceSlices publish them and with which taints, and the claim
and pod that hold them; its address pools (size, used, free); its processes'
health, versions and images, and what dra and nri say they wait for.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			n, err := o.readNode(withContext(cmd), args[0], socketDir)
			if err != nil {
				return err
			}
			return print(o, n, report.NodeTable)
		},
	}
	cmd.Flags().StringVar(&socketDir, "socket-dir", "", "read the processes through their sockets in this directory on this host (on the node, as a uid they allow) instead of exec in the netdra pod")
	return cmd
}

// readNode reads the node's view. With a socket directory the cluster is
// optional (what it could not read is a problem of the view); through the
// pod, a node whose netdra pod cannot be found is an error.
func (o *options) readNode(ctx context.Context, node, socketDir string) (report.Node, error) {
	in := report.NodeInput{Name: node, Driver: v1alpha1.DefaultDriverName, ReadErrors: map[string]error{}, Reports: map[string]process.Report{}}
	c, err := o.client()
	if err != nil && socketDir == "" {
		return report.Node{}, err
	}
	if err != nil {
		in.Problems = append(in.Problems, "the cluster: "+err.Error())
		c = nil
	}
	var src inspector = local.Sockets{Dir: socketDir}
	if c != nil {
		if nc, err := c.NodeConfig(ctx, node); err != nil {
			in.Problems = append(in.Problems, err.Error())
		} else if nc != nil {
			in.Driver = cmpOr(nc.Status.DriverName, nc.Spec.DriverName, in.Driver)
		} else {
			in.Problems = append(in.Problems, "node "+node+" has no NodeConfig")
		}
		if socketDir == "" {
			pod, err := c.NodePod(ctx, o.namespace, node)
			if err != nil {
				return report.Node{}, err
			}
			in.Pod = pod.Namespace + "/" + pod.Name
			in.Containers = cluster.Containers(pod)
			src = &cluster.Exec{Client: c, Pod: pod}
		}
	}
	inspectAll(ctx, src, &in)
	if c != nil {
		if in.Slices, err = c.Slices(ctx, in.Driver, node); err != nil {
			in.Problems = append(in.Problems, err.Error())
		}
		if in.Pods, err = c.PodNames(ctx, report.AllocatedClaims(in.Reports["state"])); err != nil {
			in.Problems = append(in.Problems, err.Error())
		}
	}
	return report.BuildNode(in), nil
}

// inspectAll reads the processes at once.
func inspectAll(ctx context.Context, src inspector, in *report.NodeInput) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range report.Processes {
		wg.Go(func() {
			r, err := src.Inspect(ctx, name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				in.ReadErrors[name] = err
				return
			}
			in.Reports[name] = r
		})
	}
	wg.Wait()
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
