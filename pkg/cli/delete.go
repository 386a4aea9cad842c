package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	cmddelete "k8s.io/kubectl/pkg/cmd/delete"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

func deleteCommand(s *session) *cobra.Command {
	flags := cmddelete.NewDeleteCommandFlags("naming the objects to delete")
	cmd := &cobra.Command{
		Use:   "delete TYPE NAME... | TYPE/NAME... | TYPE -l label | TYPE --all | -f FILE",
		Short: "Delete objects by name, label or manifest, as kubectl delete does",
		Long: `Delete objects by name, label or manifest. Their dependents (a Service's
Configuration, Route and Revisions) are deleted in the background, and the
command waits until the objects are gone (--wait=false does not).`,
		Example:      "  knbox delete ksvc hello\n  knbox delete -f service.yaml\n  knbox delete ksvc -l app=hello",
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	flags.AddFlags(cmd)
	cmdutil.AddDryRunFlag(cmd)
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		dyn, err := s.factory.DynamicClient()
		if err != nil {
			return err
		}
		o, err := flags.ToOptions(dyn, streams)
		if err != nil {
			return err
		}
		if err := o.Complete(s.factory, args, cmd); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.RunDelete(s.factory)
	})
	return cmd
}
