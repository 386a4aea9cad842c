package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// delete is knbox's own over the dynamic client. Dropped from kubectl
// delete: -k, --raw, --force (knbox has no kubelet to skip) and
// --interactive.

// deleteOptions are delete's flags.
type deleteOptions struct {
	sel            selectFlags
	wait           bool
	timeout        time.Duration
	ignoreNotFound bool
	dryRun         string
	cascade        string
	gracePeriod    int
	now            bool
	output         string // "" or name
}

func deleteCommand(s *session) *cobra.Command {
	o := deleteOptions{wait: true, dryRun: "none", cascade: "background", gracePeriod: -1}
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
	fl := cmd.Flags()
	fl.StringVarP(&o.sel.labels, "selector", "l", "", "label selector, e.g. app=hello")
	fl.StringVar(&o.sel.fields, "field-selector", "", "field selector, e.g. metadata.name=hello")
	fl.BoolVar(&o.sel.all, "all", false, "delete every object of the types")
	fl.BoolVarP(&o.sel.allNamespaces, "all-namespaces", "A", false, "with -l or --all, the objects of every namespace")
	fl.BoolVar(&o.wait, "wait", o.wait, "wait until the objects are gone")
	fl.DurationVar(&o.timeout, "timeout", 0, "how long --wait waits (0: until they are gone)")
	fl.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "succeed when a named object does not exist")
	fl.StringVar(&o.dryRun, "dry-run", o.dryRun, "none, server (the server checks the deletion and deletes nothing) or client (print what would be deleted)")
	fl.StringVar(&o.cascade, "cascade", o.cascade, "background, foreground (the object goes after its dependents) or orphan (its dependents stay)")
	fl.IntVar(&o.gracePeriod, "grace-period", o.gracePeriod, "seconds the object has to end gracefully (-1: its own default)")
	fl.BoolVar(&o.now, "now", false, "end at once (--grace-period=1)")
	fl.StringVarP(&o.output, "output", "o", "", "name: print TYPE/NAME of each object deleted")
	addFileFlags(cmd, &o.sel, "naming the objects to delete")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		opts, err := o.deleteOptions()
		if err != nil {
			return err
		}
		tt, _, err := s.targets("delete", args, o.sel, streams.In)
		if len(tt) == 0 {
			return err
		}
		if err := needNames("delete", tt, o.sel); err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		return errors.Join(err, s.delete(ctx, tt, o, opts, streams))
	})
	return cmd
}

// deleteOptions turns the flags into the request's options.
func (o deleteOptions) deleteOptions() (metav1.DeleteOptions, error) {
	var opts metav1.DeleteOptions
	if o.output != "" && o.output != "name" {
		return opts, fmt.Errorf("--output=%s: want name", o.output)
	}
	var policy metav1.DeletionPropagation
	switch o.cascade {
	case "background", "true":
		policy = metav1.DeletePropagationBackground
	case "foreground":
		policy = metav1.DeletePropagationForeground
	case "orphan", "false":
		policy = metav1.DeletePropagationOrphan
	default:
		return opts, fmt.Errorf("--cascade=%s: want background, foreground or orphan", o.cascade)
	}
	opts.PropagationPolicy = &policy
	switch o.dryRun {
	case "none", "client":
	case "server":
		opts.DryRun = []string{metav1.DryRunAll}
	default:
		return opts, fmt.Errorf("--dry-run=%s: want none, server or client", o.dryRun)
	}
	g := int64(o.gracePeriod)
	if o.now {
		if o.gracePeriod >= 0 {
			return opts, errors.New("give --now or --grace-period, not both")
		}
		g = 1
	}
	if g >= 0 {
		opts.GracePeriodSeconds = &g
	}
	return opts, nil
}

// delete deletes the targets' objects, printing a line for each, then
// (with --wait) waits until they are gone. It goes on after a failure;
// the error joins them.
func (s *session) delete(ctx context.Context, tt []selection, o deleteOptions, opts metav1.DeleteOptions, streams genericiooptions.IOStreams) error {
	type deleted struct {
		t    selection
		name string
		uid  types.UID
	}
	var gone []deleted
	var errs []error
	suffix := ""
	switch o.dryRun {
	case "server":
		suffix = " (server dry run)"
	case "client":
		suffix = " (dry run)"
	}
	matched := 0
	for _, t := range tt {
		type named struct{ ns, name string }
		var objs []named
		if t.names != nil {
			for _, n := range t.names {
				objs = append(objs, named{t.namespace, n})
			}
		} else {
			found, err := s.targetObjects(ctx, t, o.sel, false)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, f := range found {
				objs = append(objs, named{f.GetNamespace(), f.GetName()})
			}
		}
		matched += len(objs)
		for _, n := range objs {
			ri, err := s.resource(t.mapping, n.ns)
			if err != nil {
				return err
			}
			var uid types.UID
			if o.dryRun == "client" {
				obj, err := ri.Get(ctx, n.name, metav1.GetOptions{})
				if err == nil {
					uid = obj.GetUID()
				}
				err = ignoreIf(err, o.ignoreNotFound)
				if err != nil {
					errs = append(errs, s.fromSource(t, err))
				}
				if uid == "" {
					continue
				}
			} else {
				err := ri.Delete(ctx, n.name, opts)
				if apierrors.IsNotFound(err) && o.ignoreNotFound {
					continue
				}
				if err != nil {
					errs = append(errs, s.fromSource(t, err))
					continue
				}
			}
			if o.output == "name" {
				fmt.Fprintf(streams.Out, "%s/%s\n", t.kind(), n.name)
			} else {
				fmt.Fprintf(streams.Out, "%s %q deleted%s\n", t.kind(), n.name, suffix)
			}
			t := t
			t.namespace = n.ns
			gone = append(gone, deleted{t: t, name: n.name, uid: uid})
		}
	}
	if matched == 0 && len(errs) == 0 {
		fmt.Fprintln(streams.Out, "No resources found")
	}
	if o.wait && o.dryRun == "none" && len(gone) > 0 {
		wctx := ctx
		if o.timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, o.timeout)
			defer cancel()
		}
		for _, g := range gone {
			ri, err := s.resource(g.t.mapping, g.t.namespace)
			if err != nil {
				return err
			}
			_, err = waitObject(wctx, ri, g.t.mapping.Resource.GroupResource(), g.name, g.uid, waitFor{deleted: true}, false)
			if errors.Is(err, errNotMet) {
				err = fmt.Errorf("timed out waiting for %s/%s to be gone (it may still go; --timeout waits longer)", g.t.mapping.Resource.Resource, g.name)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ignoreIf drops a NotFound error when ignore is set.
func ignoreIf(err error, ignore bool) error {
	if ignore && apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
