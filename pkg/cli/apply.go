package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/jsonmergepatch"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	kubectlutil "k8s.io/kubectl/pkg/util"
)

// LastAppliedAnnotation holds the configuration last applied to an object,
// as kubectl's client-side apply keeps it.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// DefaultFieldManager names knbox apply in the objects it writes.
const DefaultFieldManager = "knbox"

// The actions apply reports, worded as kubectl prints them.
const (
	created    = "created"
	configured = "configured"
	unchanged  = "unchanged"
)

// applyOptions are apply's flags.
type applyOptions struct {
	files        []string
	recursive    bool
	fieldManager string
}

func applyCommand(s *session) *cobra.Command {
	o := applyOptions{fieldManager: DefaultFieldManager}
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|- [-f ...]",
		Short: "Create or update objects from manifests, as kubectl apply does",
		Long: `Create or update the objects that YAML or JSON manifests describe.

A manifest is a file, a directory (its *.yaml, *.yml and *.json files in
name order; with -R those of its subdirectories too) or - for stdin; a file
may hold several YAML documents separated by --- lines. Objects that exist
are updated with kubectl's three-way merge of the last applied configuration
(the kubectl.kubernetes.io/last-applied-configuration annotation), the
manifest and the live object: a field removed from the manifest is removed
from the object, fields that others set are kept. knbox apply and kubectl
apply manage the same objects.

A document that is no Kubernetes object (neither apiVersion nor kind, such
as a knbox configuration file) is skipped with a note. Every document is
tried; the command fails at the end if any did, naming the file, the
document and the field.`,
		Example:      "  knbox apply -f service.yaml\n  knbox apply -f examples/\n  cat service.yaml | knbox apply -f -",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	fl := cmd.Flags()
	fl.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file, directory or - (stdin); repeatable")
	fl.BoolVarP(&o.recursive, "recursive", "R", false, "also read the manifests in the subdirectories of a directory given with -f")
	fl.StringVar(&o.fieldManager, "field-manager", o.fieldManager, "name of the manager the server records for the fields apply writes")
	cmd.RunE = s.run(func(cmd *cobra.Command, _ []string, streams genericiooptions.IOStreams) error {
		if len(o.files) == 0 {
			return errors.New("give the manifests to apply with -f FILE|DIR|-")
		}
		docs, err := ReadPaths(o.files, o.recursive, streams.In)
		if err != nil {
			return err
		}
		return s.apply(orBackground(cmd.Context()), streams, docs, o)
	})
	return cmd
}

// apply applies the documents in order, going on after a failure, and
// prints a line per object applied (and a note per document skipped). The
// error joins every document's failure, each naming its document.
func (s *session) apply(ctx context.Context, streams genericiooptions.IOStreams, docs []Document, o applyOptions) error {
	var errs []error
	objects := 0
	for _, d := range docs {
		switch {
		case d.Skipped:
			fmt.Fprintln(streams.ErrOut, d.SkipNote())
			continue
		case d.Err != nil:
			errs = append(errs, d.Err)
			continue
		}
		objects++
		if err := s.applyObject(ctx, d, o.fieldManager, streams.Out); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Where(), s.explain(err)))
		}
	}
	if objects == 0 && len(errs) == 0 {
		return fmt.Errorf("no objects to apply in %v", o.files)
	}
	return errors.Join(errs...)
}

// applyObject creates the object if it is absent and otherwise patches it
// as kubectl's client-side apply does, then prints what it did.
func (s *session) applyObject(ctx context.Context, d Document, fieldManager string, out io.Writer) error {
	obj, mapping, err := s.objectFor(d, "apply")
	if err != nil {
		return err
	}
	ri, err := s.resource(mapping, obj.GetNamespace())
	if err != nil {
		return err
	}
	modified, err := kubectlutil.GetModifiedConfiguration(obj, true, unstructured.UnstructuredJSONScheme)
	if err != nil {
		return err
	}
	// Strict, as kubectl's default --validate=strict: an unknown field is
	// refused, not dropped with a warning (the server's default).
	const strict = metav1.FieldValidationStrict
	action := ""
	for attempt := 0; action == ""; attempt++ {
		live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if err := kubectlutil.CreateApplyAnnotation(obj, unstructured.UnstructuredJSONScheme); err != nil {
				return err
			}
			_, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager, FieldValidation: strict})
			if apierrors.IsAlreadyExists(err) && attempt == 0 {
				continue // created meanwhile: patch it instead
			}
			if err != nil {
				return err
			}
			action = created
		case err != nil:
			return err
		default:
			if action, err = patch(ctx, ri, mapping.GroupVersionKind, live, modified, fieldManager); err != nil {
				return err
			}
		}
	}
	return (&printers.NamePrinter{Operation: action}).PrintObj(obj, out)
}

// patch sends the three-way merge of the last applied configuration
// (original), the manifest (modified) and the live object: what modified
// adds or changes relative to live, and the deletion of what original had
// and modified no longer has. Kinds that client-go's scheme knows get a
// strategic merge patch (lists merged by their keys), every other kind
// (Knative's, as custom resources on a cluster) a JSON merge patch:
// kubectl's choice. A patch that changes nothing on the server counts as
// unchanged (kubectl would say configured).
func patch(ctx context.Context, ri dynamic.ResourceInterface, gvk schema.GroupVersionKind, live *unstructured.Unstructured, modified []byte, fieldManager string) (string, error) {
	current, err := runtime.Encode(unstructured.UnstructuredJSONScheme, live)
	if err != nil {
		return "", err
	}
	original, err := kubectlutil.GetOriginalConfiguration(live)
	if err != nil {
		return "", err
	}
	body, pt, err := threeWayPatch(gvk, original, modified, current)
	if err != nil {
		return "", err
	}
	if string(body) == "{}" {
		return unchanged, nil
	}
	out, err := ri.Patch(ctx, live.GetName(), pt, body, metav1.PatchOptions{FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		return "", err
	}
	if sameButStatus(live, out) {
		return unchanged, nil // e.g. lists the server had filled in with defaults
	}
	return configured, nil
}

// sameButStatus says whether two versions of an object differ only in
// what the server and controllers write on their own: status,
// resourceVersion and managedFields. (A controller may write status
// between apply's read and its patch, so the resourceVersion alone
// cannot say whether the patch changed anything.)
func sameButStatus(a, b runtime.Object) bool {
	ua, ok1 := a.(*unstructured.Unstructured)
	ub, ok2 := b.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return false
	}
	strip := func(u *unstructured.Unstructured) map[string]interface{} {
		c := u.DeepCopy()
		delete(c.Object, "status")
		c.SetResourceVersion("")
		c.SetManagedFields(nil)
		return c.Object
	}
	return equality.Semantic.DeepEqual(strip(ua), strip(ub))
}

// threeWayPatch computes apply's patch of a kind and its type.
func threeWayPatch(gvk schema.GroupVersionKind, original, modified, current []byte) ([]byte, types.PatchType, error) {
	if typed, err := scheme.Scheme.New(gvk); err == nil {
		lookup, err := strategicpatch.NewPatchMetaFromStruct(typed)
		if err != nil {
			return nil, "", err
		}
		p, err := strategicpatch.CreateThreeWayMergePatch(original, modified, current, lookup, true)
		return p, types.StrategicMergePatchType, err
	}
	p, err := jsonmergepatch.CreateThreeWayJSONMergePatch(original, modified, current,
		mergepatch.RequireKeyUnchanged("apiVersion"), mergepatch.RequireKeyUnchanged("kind"), mergepatch.RequireMetadataKeyUnchanged("name"))
	if mergepatch.IsPreconditionFailed(err) {
		return nil, "", errors.New("apply cannot change apiVersion, kind or metadata.name of an object: delete it and apply again")
	}
	return p, types.MergePatchType, err
}
