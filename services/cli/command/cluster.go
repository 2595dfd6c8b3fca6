package command

import (
	"github.com/spf13/cobra"

	"github.com/netdra/netdra/services/cli/cluster"
	"github.com/netdra/netdra/services/cli/report"
)

func (o *options) nodesCommand() *cobra.Command {
	var low report.Low
	var onlyLow bool
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Every node's address pools and their use, the nodes low on addresses first",
		Long: `Every node's address pools and their use, as dra counts them in the node's
NodeConfig status, the nodes with a low pool first. A pool is low with
fewer than --min-free addresses free or less than --min-free-percent of its
size.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ncs, err := c.NodeConfigs(withContext(cmd))
			if err != nil {
				return err
			}
			ns := report.BuildNodes(ncs, low)
			if onlyLow {
				ns = lowOnly(ns)
			}
			return print(o, ns, report.NodesTable)
		},
	}
	cmd.Flags().Int64Var(&low.MinFree, "min-free", 5, "a pool with fewer addresses free is low")
	cmd.Flags().Float64Var(&low.MinFreePercent, "min-free-percent", 10, "a pool with less of its size free is low")
	cmd.Flags().BoolVar(&onlyLow, "low", false, "show only the nodes with a low pool")
	return cmd
}

func lowOnly(ns []report.NodePools) []report.NodePools {
	out := []report.NodePools{}
	for _, n := range ns {
		if n.Low {
			out = append(out, n)
		}
	}
	return out
}

func (o *options) claimsCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "claims",
		Short: "netdra's claims that failed, and why",
		Long: `netdra's claims (allocated a device of its driver, or asking for a
DeviceClass that selects one) that failed, and why: a device condition of
the claim's status that is false, a Warning event of the claim (dra's
PrepareFailed, RecoveryRefused, DeviceLost), or of its pod (the scheduler's
FailedScheduling, the kubelet's FailedPrepareDynamicResources, the
runtime's FailedCreatePodSandBox) since the pod was last ready; and the
claims not allocated yet. --all shows the others too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ctx := withContext(cmd)
			ncs, err := c.NodeConfigs(ctx)
			if err != nil {
				return err
			}
			in, err := c.ClaimsInput(ctx, cluster.Drivers(ncs))
			if err != nil {
				return err
			}
			cs := report.BuildClaims(in)
			if !all {
				cs = notOK(cs)
			}
			return print(o, cs, report.ClaimsTable)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "show every netdra claim, not only the failed and pending ones")
	return cmd
}

func notOK(cs []report.Claim) []report.Claim {
	out := []report.Claim{}
	for _, c := range cs {
		if c.State != report.ClaimOK {
			out = append(out, c)
		}
	}
	return out
}
