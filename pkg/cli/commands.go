package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/knbox/knbox/pkg/version"
)

// Commands returns the client commands of the knbox binary: apply, get,
// delete, logs, image, kubeconfig and version. Each call returns new commands.
func Commands() []*cobra.Command {
	return []*cobra.Command{applyCommand(), getCommand(), deleteCommand(), logsCommand(), imageCommand(), kubeconfigCommand(), versionCommand()}
}

// connFlags are the connection flags of a command.
type connFlags struct {
	opts Options
	cmd  *cobra.Command
}

func addConnFlags(cmd *cobra.Command, namespace bool) *connFlags {
	f := &connFlags{cmd: cmd}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.opts.Kubeconfig, "kubeconfig", "", "kubeconfig to use (default: $KUBECONFIG if set, else <data-dir>/kubeconfig)")
	addDataDirFlag(cmd, &f.opts)
	if namespace {
		pf.StringVarP(&f.opts.Namespace, "namespace", "n", "", `namespace (default: the kubeconfig context's namespace, else "default")`)
	}
	return f
}

func addDataDirFlag(cmd *cobra.Command, o *Options) {
	cmd.PersistentFlags().StringVar(&o.DataDir, "data-dir", "", "the knbox server's data directory (default: $KNBOX_DATA_DIR if set, else "+DefaultDataDir+")")
}

// client connects as the flags say.
func (f *connFlags) client() (*Client, error) {
	rc, ns, err := f.opts.Load()
	if err != nil {
		return nil, err
	}
	// The server's warnings (e.g. Knative's about insecure defaults) as
	// kubectl prints them.
	rc.WarningHandler = rest.NewWarningWriter(f.cmd.ErrOrStderr(), rest.WarningWriterOptions{Deduplicate: true})
	c, err := NewClient(rc, ns)
	if err != nil {
		return nil, err
	}
	if fl := f.cmd.Flags().Lookup("namespace"); fl != nil && fl.Changed {
		c.EnforceNamespace = true
	}
	return c, nil
}

// interruptible ends ctx on SIGINT and SIGTERM.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func applyCommand() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|- [-f ...]",
		Short: "Create or update objects from manifests, as kubectl apply does",
		Long: `Create or update the objects that YAML or JSON manifests describe.

A manifest is a file, a directory (its *.yaml, *.yml and *.json files, not
recursively, in name order) or - for stdin; a file may hold several YAML
documents separated by --- lines. Objects that exist are updated with a
three-way merge kept in the kubectl.kubernetes.io/last-applied-configuration
annotation, so knbox apply and kubectl apply manage the same objects.
Every document is tried; the command fails at the end if any did.`,
		Example:      "  knbox apply -f service.yaml\n  knbox apply -f manifests/\n  cat service.yaml | knbox apply -f -",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	conn := addConnFlags(cmd, true)
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - (stdin); repeatable")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if len(files) == 0 {
			return errors.New("give the manifests to apply with -f FILE|DIR|-")
		}
		docs, err := ReadPaths(files, cmd.InOrStdin())
		if err != nil {
			return err
		}
		if len(docs) == 0 {
			return fmt.Errorf("no objects in %s", strings.Join(files, ", "))
		}
		c, err := conn.client()
		if err != nil {
			return err
		}
		if _, err := c.Resolver(); err != nil {
			return err // once, not for every document
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		var errs []error
		for _, d := range docs {
			r := c.ApplyOne(ctx, d)
			if r.Err != nil {
				errs = append(errs, r.Err)
				continue
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.String())
		}
		return errors.Join(errs...)
	}
	return cmd
}

func getCommand() *cobra.Command {
	var o GetOptions
	var watch bool
	cmd := &cobra.Command{
		Use:   "get KIND[,KIND...] [NAME...] | KIND/NAME...",
		Short: "Show objects, as kubectl get does",
		Long: `Show objects as the server's tables (default and -o wide), as YAML or JSON,
or as kind/name lines (-o name).

KIND is a resource's plural, singular or short name or its kind
(ksvc, service, services.serving.knative.dev, rev, rt, cfg, ns, cm, ...),
or a category: "all" is every Knative Serving kind.`,
		Example:      "  knbox get ksvc\n  knbox get all -A\n  knbox get ksvc hello -o yaml\n  knbox get rev -l serving.knative.dev/service=hello -w",
		SilenceUsage: true,
	}
	conn := addConnFlags(cmd, true)
	fl := cmd.Flags()
	fl.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the objects of every namespace")
	fl.StringVarP(&o.Output, "output", "o", "", "output format: "+strings.Join(Outputs, ", ")+" (default: a table)")
	fl.StringVarP(&o.Selector, "selector", "l", "", "label selector, e.g. app=hello,tier!=db")
	fl.BoolVarP(&watch, "watch", "w", false, "after listing, print changes as they happen (until interrupted)")
	fl.BoolVar(&o.NoHeaders, "no-headers", false, "print tables without their header line")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := conn.client()
		if err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		if watch {
			return c.Watch(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), args, o)
		}
		return c.Get(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), args, o)
	}
	return cmd
}

func deleteCommand() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:          "delete KIND NAME... | KIND/NAME... | -f FILE|DIR|-",
		Short:        "Delete objects by name or as manifests describe them",
		Example:      "  knbox delete ksvc hello\n  knbox delete -f service.yaml",
		SilenceUsage: true,
	}
	conn := addConnFlags(cmd, true)
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - (stdin) naming the objects; repeatable")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(files) > 0 && len(args) > 0 {
			return errors.New("give either -f or names, not both")
		}
		if len(files) == 0 && len(args) == 0 {
			return errors.New("name what to delete: KIND NAME..., KIND/NAME... or -f FILE")
		}
		var docs []Document
		if len(files) > 0 {
			var err error
			if docs, err = ReadPaths(files, cmd.InOrStdin()); err != nil {
				return err
			}
			if len(docs) == 0 {
				return fmt.Errorf("no objects in %s", strings.Join(files, ", "))
			}
		}
		c, err := conn.client()
		if err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		if len(files) > 0 {
			return c.DeleteDocuments(ctx, cmd.OutOrStdout(), docs)
		}
		return c.DeleteArgs(ctx, cmd.OutOrStdout(), args, c.Namespace)
	}
	return cmd
}

func kubeconfigCommand() *cobra.Command {
	var o Options
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the kubeconfig of the local knbox server (for kubectl and other clients)",
		Long: `Print the kubeconfig that knbox serve wrote into its data directory: the
server's URL, its CA and the admin token. Keep it secret.`,
		Example:      "  knbox kubeconfig > ~/.kube/knbox && KUBECONFIG=~/.kube/knbox kubectl get ksvc",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	addDataDirFlag(cmd, &o)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		b, err := ReadKubeconfig(o.DataDirPath())
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(b)
		return err
	}
	return cmd
}

// versionTimeout bounds how long version waits for the server.
const versionTimeout = 5 * time.Second

func versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:          "version",
		Short:        "Print the client's version and, if it answers, the server's",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	conn := addConnFlags(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "client: %s (%s)\n", version.Version, version.GitVersion())
		v, err := serverVersion(conn)
		if err != nil {
			fmt.Fprintf(out, "server: unreachable (%v)\n", err)
			return nil
		}
		fmt.Fprintf(out, "server: %s\n", v)
		return nil
	}
	return cmd
}

func serverVersion(conn *connFlags) (string, error) {
	rc, ns, err := conn.opts.Load()
	if err != nil {
		return "", err
	}
	rc.Timeout = versionTimeout
	rc.WarningHandler = rest.NoWarnings{}
	c, err := NewClient(rc, ns)
	if err != nil {
		return "", err
	}
	return c.ServerVersion()
}
