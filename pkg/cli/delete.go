package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Delete deletes one object (its dependents are collected in the
// background, as kubectl asks). ns is ignored for cluster-scoped kinds and
// means the client's namespace when "". A missing object is an error
// naming it.
func (c *Client) Delete(ctx context.Context, m Mapping, ns, name string) error {
	if ns == "" {
		ns = c.Namespace
	}
	bg := metav1.DeletePropagationBackground
	err := c.dynamicFor(m, ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	return Human(err)
}

// DeletedLine is what kubectl prints after a deletion:
// `service.serving.knative.dev "hello" deleted`.
func DeletedLine(m Mapping, name string) string {
	return fmt.Sprintf("%s %q deleted", m.KindGroup(), name)
}

// DeleteArgs deletes the objects args name ("KIND NAME..." or
// "KIND/NAME...") in ns, printing a line per deleted object to out. It goes
// on after a failure and returns the failures joined.
func (c *Client) DeleteArgs(ctx context.Context, out io.Writer, args []string, ns string) error {
	reqs, err := c.ParseGetArgs(args)
	if err != nil {
		return err
	}
	var errs []error
	for _, q := range reqs {
		if len(q.Names) == 0 {
			return fmt.Errorf("name the %s to delete, e.g. `knbox delete %s NAME`", q.Mapping.Resource, args[0])
		}
		for _, n := range q.Names {
			if err := c.Delete(ctx, q.Mapping, ns, n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(out, DeletedLine(q.Mapping, n))
		}
	}
	return errors.Join(errs...)
}

// DeleteDocuments deletes the objects the documents describe (namespace
// from the document, else the client's), printing a line per deleted
// object to out. It goes on after a failure and returns the failures
// joined, each naming its document.
func (c *Client) DeleteDocuments(ctx context.Context, out io.Writer, docs []Document) error {
	var errs []error
	for _, d := range docs {
		if d.Err != nil {
			errs = append(errs, d.Err)
			continue
		}
		if err := c.deleteDocument(ctx, out, d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Where(), err))
		}
	}
	return errors.Join(errs...)
}

func (c *Client) deleteDocument(ctx context.Context, out io.Writer, d Document) error {
	r, err := c.Resolver()
	if err != nil {
		return err
	}
	m, err := r.ForKind(schema.FromAPIVersionAndKind(d.Object.GetAPIVersion(), d.Object.GetKind()))
	if err != nil {
		return err
	}
	name := d.Object.GetName()
	if name == "" {
		return errors.New("metadata.name: Required value")
	}
	ns := c.Namespace
	if dns := d.Object.GetNamespace(); dns != "" && m.Namespaced {
		if c.EnforceNamespace && dns != c.Namespace {
			return fmt.Errorf("the namespace of the object (%q) does not match the namespace given (%q)", dns, c.Namespace)
		}
		ns = dns
	}
	if err := c.Delete(ctx, m, ns, name); err != nil {
		return err
	}
	fmt.Fprintln(out, DeletedLine(m, name))
	return nil
}
