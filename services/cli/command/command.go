// Package command is kubectl netdra's command line: the subcommands, their
// flags (the kubeconfig flags kubectl has), and putting what the cluster
// and the node's processes report into a table or JSON.
package command

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/netdra/netdra/services/cli/cluster"
	"github.com/netdra/netdra/services/cli/report"
	"github.com/netdra/netdra/shared/process"
)

// DefaultNamespace is netdra's namespace unless -n says otherwise.
const DefaultNamespace = "netdra-system"

// options are the flags every subcommand has.
type options struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	namespace string
	output    string
	out       io.Writer
}

// New returns the root command. name is how it was invoked (its argv[0]):
// kubectl-netdra is a kubectl plugin, shown as "kubectl netdra".
func New(name string, out, errOut io.Writer) *cobra.Command {
	o := &options{loading: clientcmd.NewDefaultClientConfigLoadingRules(), out: out}
	root := &cobra.Command{
		Use:   "netdra",
		Short: "Inspect netdra: a node's devices, address pools and processes; nodes low on addresses; failed claims",
		Long: `Inspect netdra, the node network driver, as the person on call.

A node's processes are read by running their inspect subcommand in the
netdra pod on that node (kubectl exec: no root on the host), or, with
--socket-dir on the node itself, through their sockets.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if filepath.Base(name) == "kubectl-netdra" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl netdra"}
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(out)
	root.SetErr(errOut)
	o.bind(root.PersistentFlags())
	root.AddCommand(o.nodeCommand(), o.nodesCommand(), o.claimsCommand(), versionCommand(out))
	return root
}

// bind adds kubectl's kubeconfig flags (but -n, which is netdra's
// namespace here), -n and -o.
func (o *options) bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.loading.ExplicitPath, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ContextOverrideFlags.Namespace = clientcmd.FlagInfo{}
	clientcmd.BindOverrideFlags(&o.overrides, fs, names)
	fs.StringVarP(&o.namespace, "namespace", "n", DefaultNamespace, "the namespace netdra is installed in (its release's)")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
}

func (o *options) restConfig() (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-netdra/" + process.Version()
	return cfg, nil
}

func (o *options) client() (*cluster.Client, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	return cluster.New(cfg)
}

// print writes v as JSON, or with the table writer.
func print[T any](o *options, v T, table func(io.Writer, T) error) error {
	switch strings.ToLower(o.output) {
	case "json":
		return report.JSON(o.out, v)
	case "table", "":
		return table(o.out, v)
	}
	return fmt.Errorf("-o %q: table or json", o.output)
}

func (o *options) checkOutput() error {
	switch strings.ToLower(o.output) {
	case "json", "table", "":
		return nil
	}
	return fmt.Errorf("-o %q: table or json", o.output)
}

func versionCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this command's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(out, process.Version())
			return err
		},
	}
}

// withContext is the command's context, or a background one.
func withContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
