package apiserver

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/knbox/knbox/pkg/store"
)

// StoredLabels is the store's LabelFunc (store.Options.Labels): the
// metadata.labels of a stored object. Every kind is stored as JSON with
// Kubernetes' object metadata, so reading that one field serves them all.
func StoredLabels(_ store.Key, value []byte) (map[string]string, error) {
	var obj struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(value, &obj); err != nil {
		return nil, fmt.Errorf("read metadata.labels: %w", err)
	}
	return obj.Metadata.Labels, nil
}

// indexTerms are the requirements of sel the store's label index answers:
// `key=value`, `key==value` and `key in (values)`. A list asks the store
// for the objects satisfying them all, then filters by the whole selector
// (`!=`, `notin`, existence): the index narrows, the selector decides. No
// such term: nil, and the list reads every object of the kind.
func indexTerms(sel labels.Selector) []store.LabelIn {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil
	}
	var terms []store.LabelIn
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			terms = append(terms, store.LabelIn{Key: r.Key(), Values: r.Values().List()})
		}
	}
	return terms
}
