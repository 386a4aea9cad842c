package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/discovery"
)

// api-resources is knbox's own, from discovery's preferred versions, with
// kubectl's columns, filters and order (by group, then name).

// apiResourcesOptions are api-resources' flags.
type apiResourcesOptions struct {
	output     string
	noHeaders  bool
	group      string
	byGroup    bool // --api-group was given ("" is the core group)
	namespaced bool
	verbs      []string
	sortBy     string
	categories []string
}

func apiResourcesCommand(s *session) *cobra.Command {
	var o apiResourcesOptions
	cmd := &cobra.Command{
		Use:          "api-resources",
		Short:        "List the kinds the server serves, with their short names and categories",
		Example:      "  knbox api-resources\n  knbox api-resources --api-group=serving.knative.dev -o wide",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	s.addFlags(cmd, false)
	fl := cmd.Flags()
	fl.BoolVar(&o.noHeaders, "no-headers", false, "print no header line")
	fl.StringVarP(&o.output, "output", "o", "", "output format: wide or name")
	fl.StringVar(&o.group, "api-group", "", "only the resources of this API group")
	fl.BoolVar(&o.namespaced, "namespaced", true, "with false, only cluster-scoped resources; with true, only namespaced ones")
	fl.StringSliceVar(&o.verbs, "verbs", nil, "only the resources that support these verbs")
	fl.StringVar(&o.sortBy, "sort-by", "", "sort by name or kind")
	fl.StringSliceVar(&o.categories, "categories", nil, "only the resources of these categories")
	cmd.RunE = s.run(func(cmd *cobra.Command, _ []string, streams genericiooptions.IOStreams) error {
		switch o.output {
		case "", "wide", "name":
		default:
			return fmt.Errorf("--output %s: want wide or name", o.output)
		}
		switch o.sortBy {
		case "", "name", "kind":
		default:
			return fmt.Errorf("--sort-by %s: want name or kind", o.sortBy)
		}
		d, err := s.conn.ToDiscoveryClient()
		if err != nil {
			return err
		}
		lists, err := d.ServerPreferredResources()
		if err != nil && (len(lists) == 0 || !discovery.IsGroupDiscoveryFailedError(err)) {
			return err
		}
		// Groups that failed are named on stderr; the others are listed.
		if err != nil {
			fmt.Fprintln(streams.ErrOut, "Warning:", err)
		}
		o.byGroup = cmd.Flags().Changed("api-group")
		rs := filterResources(lists, o, cmd.Flags().Changed("namespaced"))
		return printResources(streams.Out, rs, o)
	})
	return cmd
}

// groupResource is a resource with its group version.
type groupResource struct {
	gv schema.GroupVersion
	r  metav1.APIResource
}

// filterResources keeps the resources the flags ask for, sorted.
func filterResources(lists []*metav1.APIResourceList, o apiResourcesOptions, byScope bool) []groupResource {
	var out []groupResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		if o.byGroup && gv.Group != o.group {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // subresources
			}
			if byScope && r.Namespaced != o.namespaced {
				continue
			}
			if !containsAll(r.Verbs, o.verbs) || !containsAll(r.Categories, o.categories) {
				continue
			}
			out = append(out, groupResource{gv: gv, r: r})
		}
	}
	key := func(g groupResource) string {
		switch o.sortBy {
		case "name":
			return g.r.Name
		case "kind":
			return g.r.Kind
		}
		return g.gv.Group
	}
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := key(out[i]), key(out[j]); a != b {
			return a < b
		}
		return out[i].r.Name < out[j].r.Name
	})
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// printResources prints api-resources' table (or names).
func printResources(out io.Writer, rs []groupResource, o apiResourcesOptions) error {
	if o.output == "name" {
		for _, g := range rs {
			name := g.r.Name
			if g.gv.Group != "" {
				name += "." + g.gv.Group
			}
			fmt.Fprintln(out, name)
		}
		return nil
	}
	w := printers.GetNewTabWriter(out)
	defer w.Flush()
	if !o.noHeaders {
		h := "NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND"
		if o.output == "wide" {
			h += "\tVERBS\tCATEGORIES"
		}
		fmt.Fprintln(w, h)
	}
	for _, g := range rs {
		line := strings.Join([]string{g.r.Name, strings.Join(g.r.ShortNames, ","), g.gv.String(), strconv.FormatBool(g.r.Namespaced), g.r.Kind}, "\t")
		if o.output == "wide" {
			line += "\t" + strings.Join(g.r.Verbs, ",") + "\t" + strings.Join(g.r.Categories, ",")
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
