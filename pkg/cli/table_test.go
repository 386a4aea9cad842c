package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func testTable() *metav1.Table {
	meta := func(ns string) runtime.RawExtension {
		b, _ := json.Marshal(metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
		return runtime.RawExtension{Raw: b}
	}
	return &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"},
			{Name: "Ready", Type: "string"},
			{Name: "Config Name", Type: "string", Priority: 1},
			{Name: "Replicas", Type: "integer"},
			{Name: "Age", Type: "string"},
		},
		Rows: []metav1.TableRow{
			{Cells: []interface{}{"hello", "True", "hello-config", float64(3), "5m"}, Object: meta("default")},
			{Cells: []interface{}{"a-much-longer-name", nil, "c", nil, "2d"}, Object: meta("team-a")},
			{Cells: []interface{}{"multi", "line one\nline two", "c", int64(12), "1s"}},
		},
	}
}

func TestPrintTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts TableOptions
		want string
	}{{
		name: "default",
		want: "" +
			"NAME                 READY         REPLICAS   AGE\n" +
			"hello                True          3          5m\n" +
			"a-much-longer-name                            2d\n" +
			"multi                line one...   12         1s\n",
	}, {
		name: "wide",
		opts: TableOptions{Wide: true},
		want: "" +
			"NAME                 READY         CONFIG NAME    REPLICAS   AGE\n" +
			"hello                True          hello-config   3          5m\n" +
			"a-much-longer-name                 c                         2d\n" +
			"multi                line one...   c              12         1s\n",
	}, {
		name: "all namespaces, no headers, kind prefix",
		opts: TableOptions{WithNamespace: true, NoHeaders: true, NamePrefix: "service.serving.knative.dev/"},
		want: "" +
			// Columns are at least 10 wide even without a header.
			"default   service.serving.knative.dev/hello                True          3         5m\n" +
			"team-a    service.serving.knative.dev/a-much-longer-name                           2d\n" +
			"          service.serving.knative.dev/multi                line one...   12        1s\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := PrintTable(&b, testTable(), tt.opts); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestTablePrinterKeepsWidths(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	tb := testTable()
	p := newTablePrinter(&b, tb.ColumnDefinitions, TableOptions{})
	rows := [][]string{p.cells(tb.Rows[0])}
	p.grow(rows)
	if err := p.print(rows); err != nil {
		t.Fatal(err)
	}
	// A later, longer row widens its column; the header is not repeated.
	rows = [][]string{p.cells(tb.Rows[1])}
	p.grow(rows)
	if err := p.print(rows); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME      READY     REPLICAS   AGE\n" +
		"hello     True      3          5m\n" +
		"a-much-longer-name                        2d\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
