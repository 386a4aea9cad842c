package cli

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TableOptions say how PrintTable lays out a server-side Table.
type TableOptions struct {
	Wide          bool   // also the columns of priority > 0
	WithNamespace bool   // a NAMESPACE column first, read from each row's object
	NoHeaders     bool   // no header line
	NamePrefix    string // put before every name, e.g. "service.serving.knative.dev/"
}

// Column layout as kubectl's: every column but the last is padded to its
// widest cell plus 3 spaces, and to at least 10.
const (
	columnPadding  = 3
	columnMinWidth = 10
)

// PrintTable prints t aligned as kubectl prints it: column names in upper
// case, then one line per row.
func PrintTable(w io.Writer, t *metav1.Table, opts TableOptions) error {
	p := newTablePrinter(w, t.ColumnDefinitions, opts)
	rows := make([][]string, 0, len(t.Rows))
	for _, r := range t.Rows {
		rows = append(rows, p.cells(r))
	}
	p.grow(rows)
	return p.print(rows)
}

// tablePrinter prints rows of one kind's Table, keeping the column widths
// from one call of print to the next (for watches).
type tablePrinter struct {
	w       io.Writer
	opts    TableOptions
	cols    []int // indices of the shown columns
	nameCol int   // index of the name column
	header  []string
	widths  []int
	printed bool // header done
}

func newTablePrinter(w io.Writer, defs []metav1.TableColumnDefinition, opts TableOptions) *tablePrinter {
	p := &tablePrinter{w: w, opts: opts, nameCol: -1}
	if opts.WithNamespace {
		p.header = append(p.header, "NAMESPACE")
	}
	for i, d := range defs {
		if d.Priority > 0 && !opts.Wide {
			continue
		}
		if p.nameCol < 0 && d.Format == "name" {
			p.nameCol = i
		}
		p.cols = append(p.cols, i)
		p.header = append(p.header, strings.ToUpper(d.Name))
	}
	if p.nameCol < 0 && len(defs) > 0 {
		p.nameCol = 0
	}
	p.widths = make([]int, len(p.header))
	if !opts.NoHeaders {
		p.grow([][]string{p.header})
	}
	return p
}

// cells renders one row's shown cells as text.
func (p *tablePrinter) cells(r metav1.TableRow) []string {
	out := make([]string, 0, len(p.header))
	if p.opts.WithNamespace {
		out = append(out, rowNamespace(r))
	}
	for _, i := range p.cols {
		var v interface{}
		if i < len(r.Cells) {
			v = r.Cells[i]
		}
		s := cellText(v)
		if i == p.nameCol {
			s = p.opts.NamePrefix + s
		}
		out = append(out, s)
	}
	return out
}

// grow widens the columns to fit rows.
func (p *tablePrinter) grow(rows [][]string) {
	for _, r := range rows {
		for i, s := range r {
			if i < len(p.widths) {
				p.widths[i] = max(p.widths[i], utf8.RuneCountInString(s))
			}
		}
	}
}

// print writes the header (once) and rows.
func (p *tablePrinter) print(rows [][]string) error {
	var b strings.Builder
	if !p.printed && !p.opts.NoHeaders {
		p.line(&b, p.header)
	}
	p.printed = true
	for _, r := range rows {
		p.line(&b, r)
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

func (p *tablePrinter) line(b *strings.Builder, cells []string) {
	var l strings.Builder
	for i, s := range cells {
		l.WriteString(s)
		if i == len(cells)-1 {
			break
		}
		width := max(p.widths[i]+columnPadding, columnMinWidth)
		l.WriteString(strings.Repeat(" ", max(width-utf8.RuneCountInString(s), 1)))
	}
	b.WriteString(strings.TrimRight(l.String(), " "))
	b.WriteByte('\n')
}

// cellText renders a cell: strings up to their first line break (with
// "..." when cut), numbers without exponent, nothing for null.
func cellText(v interface{}) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if i := strings.IndexAny(x, "\r\n\f"); i >= 0 {
			return x[:i] + "..."
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return ""
		}
		return string(b)
	}
}

// rowNamespace reads the namespace from the row's object (the server's
// PartialObjectMetadata, or the full object).
func rowNamespace(r metav1.TableRow) string {
	if r.Object.Object != nil {
		if o, ok := r.Object.Object.(metav1.Object); ok {
			return o.GetNamespace()
		}
	}
	if len(r.Object.Raw) == 0 {
		return ""
	}
	var m struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if json.Unmarshal(r.Object.Raw, &m) != nil {
		return ""
	}
	return m.Metadata.Namespace
}
