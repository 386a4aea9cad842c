package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	cmdwait "k8s.io/kubectl/pkg/cmd/wait"
)

func waitCommand(s *session) *cobra.Command {
	flags := cmdwait.NewWaitFlags(s.conn, genericiooptions.IOStreams{})
	cmd := &cobra.Command{
		Use:   "wait TYPE/NAME... | TYPE [-l label | --all] | -f FILE --for=condition=NAME[=VALUE]|delete|jsonpath='{EXPR}'=VALUE",
		Short: "Wait until objects meet a condition, as kubectl wait does",
		Long: `Wait until every named object meets the condition: a status condition
(--for=condition=Ready, --for=condition=Ready=False), its deletion
(--for=delete), or a JSONPath expression's value (--for=jsonpath='{.status.url}'=URL).
It fails when --timeout (default 30s) passes first.`,
		Example: `  knbox wait ksvc/hello --for=condition=Ready
  knbox wait ksvc --all --for=condition=Ready --timeout=2m
  knbox wait ksvc/hello --for=delete`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	flags.AddFlags(cmd)
	cmd.RunE = s.run(func(_ *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		flags.IOStreams = streams
		o, err := flags.ToOptions(args)
		if err != nil {
			return err
		}
		return o.RunWait()
	})
	return cmd
}
