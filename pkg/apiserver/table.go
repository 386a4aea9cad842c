package apiserver

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

func col(name, typ, desc string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc}
}

// cols frames kind-specific columns with Name first and Age last, as
// kubectl shows every kind.
func cols(cs ...metav1.TableColumnDefinition) []metav1.TableColumnDefinition {
	out := []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: "Name of the object"}}
	out = append(out, cs...)
	return append(out, metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "Time since creation"})
}

func readyCond(cs duckv1.Conditions) (status, reason string) {
	for _, c := range cs {
		if c.Type == apis.ConditionReady {
			return string(c.Status), c.Reason
		}
	}
	return "", ""
}

func urlString(u *apis.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}

func optInt(p *int32) interface{} {
	if p == nil {
		return nil
	}
	return int64(*p)
}

// tableOptions are the parts of a Table request the server honours.
type tableOptions struct {
	version       string // meta.k8s.io version the client asked for
	includeObject metav1.IncludeObjectPolicy
}

// toTable renders objects (already in the requested version) as a Table.
// stored holds the same objects in the storage version, which the row
// functions read.
func (s *Server) toTable(k *Kind, objs, stored []runtime.Object, listMeta metav1.ListMeta, opts tableOptions) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: k.Columns, ListMeta: listMeta, Rows: []metav1.TableRow{}}
	t.APIVersion = "meta.k8s.io/" + opts.version
	t.Kind = "Table"
	now := time.Now()
	for i, o := range objs {
		m := accessor(stored[i])
		cells := []interface{}{m.GetName()}
		if k.Row != nil {
			cells = append(cells, k.Row(stored[i])...)
		}
		age := "<unknown>"
		if ts := m.GetCreationTimestamp(); !ts.IsZero() {
			age = duration.HumanDuration(now.Sub(ts.Time))
		}
		cells = append(cells, age)
		row := metav1.TableRow{Cells: cells}
		switch opts.includeObject {
		case metav1.IncludeNone:
		case metav1.IncludeObject:
			row.Object = runtime.RawExtension{Object: o}
		default:
			row.Object = runtime.RawExtension{Object: partialMetadata(o, opts.version)}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func partialMetadata(o runtime.Object, version string) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{ObjectMeta: *accessor(o).DeepCopy()}
	p.APIVersion = "meta.k8s.io/" + version
	p.Kind = "PartialObjectMetadata"
	p.ManagedFields = nil
	return p
}
