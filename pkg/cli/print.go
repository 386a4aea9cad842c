package cli

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// printFlags are get's output flags: -o and what goes with it. They build
// cli-runtime's printers (not its PrintFlags, which live in the
// genericclioptions package and so pull in its resource builder and
// kustomize); custom-columns is knbox's own, as kubectl's lives in its
// command library.
type printFlags struct {
	output       string
	template     string
	noHeaders    bool
	showLabels   bool
	showKind     bool
	labelColumns []string
	sortBy       string
	allowMissing bool
	managed      bool // --show-managed-fields
}

func (p *printFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&p.output, "output", "o", "", "output format: "+strings.Join(outputFormats, "|")+" (default: the server's table)")
	fs.StringVar(&p.template, "template", "", "the template or JSONPath expression of -o go-template|jsonpath (or its file, for -o go-template-file|jsonpath-file)")
	fs.BoolVar(&p.noHeaders, "no-headers", false, "print tables without their header line")
	fs.BoolVar(&p.showLabels, "show-labels", false, "add a LABELS column to tables")
	fs.BoolVar(&p.showKind, "show-kind", false, "name each row's kind in tables")
	fs.StringSliceVarP(&p.labelColumns, "label-columns", "L", nil, "add a column with the value of each of these labels to tables")
	fs.StringVar(&p.sortBy, "sort-by", "", "sort by the value of this JSONPath expression, e.g. .metadata.name or '{.status.url}' (strings, numbers or times)")
	fs.BoolVar(&p.allowMissing, "allow-missing-template-keys", true, "a template or JSONPath key the object lacks prints nothing rather than failing")
	fs.BoolVar(&p.managed, "show-managed-fields", false, "keep metadata.managedFields in -o json|yaml|jsonpath|go-template")
}

// outputFormats are -o's values (those with =: followed by their argument).
var outputFormats = []string{"custom-columns", "custom-columns-file", "go-template", "go-template-file", "json", "jsonpath", "jsonpath-as-json", "jsonpath-file", "name", "template", "templatefile", "wide", "yaml"}

// table says whether -o asks for the server's tables.
func (p *printFlags) table() bool { return p.output == "" || p.output == "wide" }

// validate checks -o and --sort-by before a request is made.
func (p *printFlags) validate() error {
	if p.sortBy != "" {
		if _, err := parseSortBy(p.sortBy); err != nil {
			return err
		}
	}
	if p.table() {
		return nil
	}
	_, err := p.objectPrinter()
	return err
}

// objectPrinter is the printer of a format other than the tables.
func (p *printFlags) objectPrinter() (printers.ResourcePrinter, error) {
	format, arg, hasArg := strings.Cut(p.output, "=")
	if !hasArg {
		arg = p.template
	}
	var pr printers.ResourcePrinter
	switch format {
	case "json":
		pr = &printers.JSONPrinter{}
	case "yaml":
		pr = &printers.YAMLPrinter{}
	case "name":
		pr = &printers.NamePrinter{}
	case "jsonpath", "jsonpath-as-json", "jsonpath-file":
		expr, err := templateArg(format, arg)
		if err != nil {
			return nil, err
		}
		jp, err := printers.NewJSONPathPrinter(expr)
		if err != nil {
			return nil, fmt.Errorf("error parsing jsonpath %s, %v", expr, err)
		}
		jp.AllowMissingKeys(p.allowMissing)
		jp.EnableJSONOutput(format == "jsonpath-as-json")
		pr = jp
	case "go-template", "go-template-file", "template", "templatefile":
		tmpl, err := templateArg(format, arg)
		if err != nil {
			return nil, err
		}
		gp, err := printers.NewGoTemplatePrinter([]byte(tmpl))
		if err != nil {
			return nil, fmt.Errorf("error parsing template %s, %v", tmpl, err)
		}
		gp.AllowMissingKeys(p.allowMissing)
		pr = gp
	case "custom-columns", "custom-columns-file":
		spec, err := templateArg(format, arg)
		if err != nil {
			return nil, err
		}
		cols, err := parseColumns(spec, format == "custom-columns-file")
		if err != nil {
			return nil, err
		}
		return &columnsPrinter{columns: cols, noHeaders: p.noHeaders}, nil
	default:
		return nil, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s", p.output, strings.Join(outputFormats, ","))
	}
	if !p.managed && format != "name" {
		pr = &printers.OmitManagedFieldsPrinter{Delegate: pr}
	}
	return pr, nil
}

// templateArg is the template of a format: its argument, or the content
// of the file it names for the -file formats.
func templateArg(format, arg string) (string, error) {
	if arg == "" {
		return "", fmt.Errorf("-o %s needs its argument: -o %s=... or --template", format, format)
	}
	if !strings.HasSuffix(format, "file") {
		return arg, nil
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return "", fmt.Errorf("-o %s: %w", format, err)
	}
	return string(b), nil
}

// relaxedJSONPath accepts a JSONPath expression as kubectl's flags do:
// "name1.name2", ".name1.name2", "{name1.name2}" or "{.name1.name2}", and
// returns it in braces.
func relaxedJSONPath(s string) (string, error) {
	s = strings.TrimSpace(s)
	m := relaxedRE.FindStringSubmatch(s)
	if m == nil || s == "" || (strings.HasPrefix(s, "{") != strings.HasSuffix(s, "}")) {
		return "", fmt.Errorf("%q is not a field path: write it as a.b, .a.b, {a.b} or {.a.b}", s)
	}
	p := m[1]
	if !strings.HasPrefix(p, ".") {
		p = "." + p
	}
	return "{" + p + "}", nil
}

var relaxedRE = regexp.MustCompile(`^\{?([^{}]*)\}?$`)

// column is one column of -o custom-columns.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseColumns reads custom-columns' spec: NAME:PATH[,NAME:PATH...], or
// with fromFile a header line and a line of paths.
func parseColumns(spec string, fromFile bool) ([]column, error) {
	var headers, paths []string
	if fromFile {
		lines := strings.Split(strings.TrimSpace(spec), "\n")
		if len(lines) != 2 {
			return nil, fmt.Errorf("a custom-columns file has two lines, the headers and the paths; it has %d", len(lines))
		}
		headers, paths = strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(headers) != len(paths) {
			return nil, fmt.Errorf("a custom-columns file has as many paths as headers: %d headers, %d paths", len(headers), len(paths))
		}
	} else {
		for _, part := range strings.Split(spec, ",") {
			h, p, ok := strings.Cut(part, ":")
			if !ok || h == "" || p == "" || strings.IndexFunc(h, unicode.IsSpace) >= 0 || strings.IndexFunc(h, unicode.IsControl) >= 0 {
				return nil, fmt.Errorf("custom-columns: %q is no NAME:PATH column (e.g. NAME:.metadata.name; NAME without spaces)", part)
			}
			headers, paths = append(headers, h), append(paths, p)
		}
	}
	cols := make([]column, len(headers))
	for i := range headers {
		expr, err := relaxedJSONPath(paths[i])
		if err != nil {
			return nil, fmt.Errorf("custom-columns %s: %w", headers[i], err)
		}
		jp := jsonpath.New(headers[i]).AllowMissingKeys(true)
		if err := jp.Parse(expr); err != nil {
			return nil, fmt.Errorf("custom-columns %s: %s: %w", headers[i], expr, err)
		}
		cols[i] = column{header: headers[i], path: jp}
	}
	return cols, nil
}

// columnsPrinter prints -o custom-columns: a row per object (per item of
// a list), a column's several values joined with commas, "<none>" for
// none.
type columnsPrinter struct {
	columns   []column
	noHeaders bool
	printed   bool // the header line
}

func (c *columnsPrinter) PrintObj(obj runtime.Object, out io.Writer) error {
	w := printers.GetNewTabWriter(out)
	defer w.Flush()
	if !c.noHeaders && !c.printed {
		headers := make([]string, len(c.columns))
		for i, col := range c.columns {
			headers[i] = col.header
		}
		fmt.Fprintln(w, strings.Join(headers, "\t"))
		c.printed = true
	}
	var items []map[string]interface{}
	switch o := obj.(type) {
	case *unstructured.UnstructuredList:
		for i := range o.Items {
			items = append(items, o.Items[i].Object)
		}
	case *unstructured.Unstructured:
		items = append(items, o.Object)
	default:
		return fmt.Errorf("custom-columns cannot print a %T", obj)
	}
	for _, it := range items {
		cells := make([]string, len(c.columns))
		for i, col := range c.columns {
			res, err := col.path.FindResults(it)
			if err != nil {
				return err
			}
			var vals []string
			for _, r := range res {
				for _, v := range r {
					vals = append(vals, fmt.Sprint(v.Interface()))
				}
			}
			// A cell is one line of one column: line breaks and tabs in
			// a value become spaces.
			cells[i] = strings.Map(oneLineRune, strings.Join(vals, ","))
			if len(vals) == 0 {
				cells[i] = "<none>"
			}
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return nil
}

func oneLineRune(r rune) rune {
	if unicode.IsControl(r) {
		return ' '
	}
	return r
}

// parseSortBy parses --sort-by's expression.
func parseSortBy(s string) (*jsonpath.JSONPath, error) {
	expr, err := relaxedJSONPath(s)
	if err != nil {
		return nil, fmt.Errorf("--sort-by: %w", err)
	}
	jp := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := jp.Parse(expr); err != nil {
		return nil, fmt.Errorf("--sort-by %s: %w", expr, err)
	}
	return jp, nil
}

// sortObjects sorts objs (stable) by the value of --sort-by's expression
// in each: numbers by value, strings that are RFC 3339 times by time,
// other strings as strings, booleans false first; an object without the
// value sorts first. Values of other types (maps, lists) or of different
// types cannot be compared: that is an error naming the expression.
func sortObjects(sortBy string, objs []map[string]interface{}) ([]int, error) {
	jp, err := parseSortBy(sortBy)
	if err != nil {
		return nil, err
	}
	keys := make([]interface{}, len(objs))
	for i, o := range objs {
		res, err := jp.FindResults(o)
		if err != nil {
			return nil, fmt.Errorf("--sort-by %s: %w", sortBy, err)
		}
		if len(res) == 0 || len(res[0]) == 0 {
			continue // missing: nil sorts first
		}
		if len(res) > 1 || len(res[0]) > 1 {
			return nil, fmt.Errorf("--sort-by %s: the expression gives several values per object; give one that gives one", sortBy)
		}
		v := res[0][0]
		for v.Kind() == reflect.Interface && !v.IsNil() {
			v = v.Elem()
		}
		if !v.IsValid() || (v.Kind() == reflect.Interface && v.IsNil()) {
			continue
		}
		k, err := sortKey(v.Interface())
		if err != nil {
			return nil, fmt.Errorf("cannot sort by %s: %w", sortBy, err)
		}
		keys[i] = k
	}
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	var cmpErr error
	sort.SliceStable(order, func(a, b int) bool {
		less, err := lessKey(keys[order[a]], keys[order[b]])
		if err != nil && cmpErr == nil {
			cmpErr = fmt.Errorf("--sort-by %s: %w", sortBy, err)
		}
		return less
	})
	return order, cmpErr
}

// sortKey is a value --sort-by can compare: float64, time.Time, string or bool.
func sortKey(v interface{}) (interface{}, error) {
	switch x := v.(type) {
	case string:
		if t, err := time.Parse(time.RFC3339, x); err == nil {
			return t, nil
		}
		return x, nil
	case bool:
		return x, nil
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	case float64:
		return x, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("its value is %s, which does not sort; give an expression whose values are strings, numbers or times", jsonType(v))
}

func lessKey(a, b interface{}) (bool, error) {
	switch {
	case a == nil:
		return b != nil, nil
	case b == nil:
		return false, nil
	}
	switch x := a.(type) {
	case float64:
		if y, ok := b.(float64); ok {
			return x < y, nil
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Before(y), nil
		}
		if y, ok := b.(string); ok { // a time among strings: compare the text
			return x.Format(time.RFC3339) < y, nil
		}
	case string:
		if y, ok := b.(string); ok {
			return x < y, nil
		}
		if y, ok := b.(time.Time); ok {
			return x < y.Format(time.RFC3339), nil
		}
	case bool:
		if y, ok := b.(bool); ok {
			return !x && y, nil
		}
	}
	return false, fmt.Errorf("cannot compare a %T with a %T", a, b)
}

// printObjects prints objects in a non-table format: one object as
// itself when the arguments named one, else a List of them (name prints
// each).
func printObjects(pr printers.ResourcePrinter, objs []*unstructured.Unstructured, single bool, out io.Writer) error {
	if single && len(objs) == 1 {
		return pr.PrintObj(objs[0], out)
	}
	if isName(pr) {
		for _, o := range objs {
			if err := pr.PrintObj(o, out); err != nil {
				return err
			}
		}
		return nil
	}
	list := &unstructured.UnstructuredList{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]interface{}{"resourceVersion": ""},
	}}
	for _, o := range objs {
		list.Items = append(list.Items, *o)
	}
	// JSONPath and templates see the list as a map with its items, as
	// kubectl gives it.
	return pr.PrintObj(list, out)
}

func isName(pr printers.ResourcePrinter) bool {
	_, ok := pr.(*printers.NamePrinter)
	return ok
}
