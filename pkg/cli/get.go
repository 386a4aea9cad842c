package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/kubectl/pkg/cmd/apiresources"
	cmddescribe "k8s.io/kubectl/pkg/cmd/describe"
	cmdget "k8s.io/kubectl/pkg/cmd/get"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

// The reading commands are kubectl's own (k8s.io/kubectl's command
// libraries over the session's connection), so their flags, output and
// behaviour are kubectl's: server-side tables, -o
// yaml|json|wide|name|jsonpath|custom-columns|go-template, --sort-by, -w,
// describe with conditions and events.

func getCommand(s *session) *cobra.Command {
	o := cmdget.NewGetOptions("knbox", genericiooptions.IOStreams{})
	cmd := &cobra.Command{
		Use:   "get TYPE[,TYPE...] [NAME...] | TYPE/NAME... | -f FILE [flags]",
		Short: "Show objects, as kubectl get does",
		Long: `Show objects as the server's tables (default and -o wide) or in any of
kubectl's output formats.

TYPE is a resource's plural, singular or short name or its kind (ksvc,
service, services.serving.knative.dev, rev, rt, cfg, ns, cm, ...), or a
category: "all" is every Knative Serving kind. knbox api-resources lists
them.`,
		Example: `  knbox get ksvc
  knbox get all -A
  knbox get ksvc hello -o yaml
  knbox get ksvc -o jsonpath='{.items[*].status.url}'
  knbox get rev -o custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status --sort-by=.metadata.creationTimestamp
  knbox get rev -l serving.knative.dev/service=hello -w`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	o.PrintFlags.AddFlags(cmd)
	fl := cmd.Flags()
	fl.BoolVarP(&o.Watch, "watch", "w", o.Watch, "after listing or getting the objects, print their changes as they happen")
	fl.BoolVar(&o.WatchOnly, "watch-only", o.WatchOnly, "print the objects' changes, without listing or getting them first")
	fl.BoolVar(&o.OutputWatchEvents, "output-watch-events", o.OutputWatchEvents, "print watch events (ADDED, MODIFIED, DELETED) with -w or --watch-only")
	fl.BoolVar(&o.IgnoreNotFound, "ignore-not-found", o.IgnoreNotFound, "succeed when a named object does not exist")
	fl.StringVar(&o.FieldSelector, "field-selector", o.FieldSelector, "field selector, e.g. metadata.name=hello")
	fl.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", o.AllNamespaces, "list the objects of every namespace")
	fl.BoolVar(&o.ServerPrint, "server-print", o.ServerPrint, "print the tables the server computes (the columns kubectl shows for the kind)")
	cmdutil.AddFilenameOptionFlags(cmd, &o.FilenameOptions, "naming the objects to get")
	cmdutil.AddChunkSizeFlag(cmd, &o.ChunkSize)
	cmdutil.AddLabelSelectorFlagVar(cmd, &o.LabelSelector)
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		o.IOStreams = streams
		if len(args) == 0 && len(o.Filenames) == 0 && o.Kustomize == "" {
			return errNoType("get")
		}
		if err := o.Complete(s.factory, cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(s.factory, args)
	})
	return cmd
}

// errNoType is the error of a reading command given nothing to read.
func errNoType(verb string) error {
	return fmt.Errorf("name a resource type, e.g. `knbox %s ksvc`, or give -f FILE; `knbox api-resources` lists the types", verb)
}

func describeCommand(s *session) *cobra.Command {
	flags := cmddescribe.NewDescribeFlags(s.factory, genericiooptions.IOStreams{})
	cmd := &cobra.Command{
		Use:   "describe TYPE [NAME_PREFIX | -l label] | TYPE/NAME | -f FILE",
		Short: "Show an object in detail with its conditions and events, as kubectl describe does",
		Example: `  knbox describe ksvc hello
  knbox describe rev -l serving.knative.dev/service=hello
  knbox describe route/hello`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	flags.AddFlags(cmd)
	cmd.RunE = s.run(func(_ *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		flags.IOStreams = streams
		if len(args) == 0 && len(flags.FilenameOptions.Filenames) == 0 && flags.FilenameOptions.Kustomize == "" {
			return errNoType("describe")
		}
		// kubectl's describers of core kinds fail when the server serves
		// no Events; then describe goes without them.
		if flags.DescriberSettings.ShowEvents && !s.serves("", "v1", "events") {
			flags.DescriberSettings.ShowEvents = false
		}
		o, err := flags.ToOptions("knbox", args)
		if err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run()
	})
	return cmd
}

// serves says whether discovery lists resource in group/version (false
// when discovery fails: the command itself then says why).
func (s *session) serves(group, version, resource string) bool {
	d, err := s.conn.ToDiscoveryClient()
	if err != nil {
		return false
	}
	l, err := d.ServerResourcesForGroupVersion(schema.GroupVersion{Group: group, Version: version}.String())
	if err != nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

func apiResourcesCommand(s *session) *cobra.Command {
	o := apiresources.NewAPIResourceOptions(genericiooptions.IOStreams{})
	cmd := &cobra.Command{
		Use:          "api-resources",
		Short:        "List the kinds the server serves, with their short names and categories",
		Example:      "  knbox api-resources\n  knbox api-resources --api-group=serving.knative.dev -o wide",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	s.addFlags(cmd, false)
	fl := cmd.Flags()
	fl.BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "print no header line")
	fl.StringVarP(&o.Output, "output", "o", o.Output, "output format: wide or name")
	fl.StringVar(&o.APIGroup, "api-group", o.APIGroup, "only the resources of this API group")
	fl.BoolVar(&o.Namespaced, "namespaced", o.Namespaced, "with false, only cluster-scoped resources; with true, only namespaced ones")
	fl.StringSliceVar(&o.Verbs, "verbs", o.Verbs, "only the resources that support these verbs")
	fl.StringVar(&o.SortBy, "sort-by", o.SortBy, "sort by name or kind")
	fl.StringSliceVar(&o.Categories, "categories", o.Categories, "only the resources of these categories")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		o.IOStreams = streams
		if err := o.Complete(s.conn, cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.RunAPIResources()
	})
	return cmd
}
