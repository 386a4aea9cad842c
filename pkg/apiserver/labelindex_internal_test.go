package apiserver

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// FuzzIndexTerms: the index terms of a selector never exclude an object
// the selector matches (the index narrows, the selector decides), and
// every term has values.
func FuzzIndexTerms(f *testing.F) {
	for _, s := range []string{
		"a=b", "a==b", "a in (b,c)", "a=b,c!=d", "a notin (b),c", "!a", "a", "a=b,a=c",
		"a in (b),a in (c,b)", "x.io/y=z,w in (1,2,3)", "", "a=",
	} {
		f.Add(s, "a", "b", "c", "d")
	}
	f.Fuzz(func(t *testing.T, selector, k1, v1, k2, v2 string) {
		sel, err := labels.Parse(selector)
		if err != nil {
			return
		}
		terms := indexTerms(sel)
		for _, term := range terms {
			if len(term.Values) == 0 {
				t.Fatalf("%q: term %v without values", selector, term)
			}
		}
		// Label sets built from the selector's own values, and the fuzzed ones.
		sets := []labels.Set{{k1: v1, k2: v2}, {k1: v1}}
		reqs, _ := sel.Requirements()
		s := labels.Set{}
		for _, r := range reqs {
			if vs := r.Values().List(); len(vs) > 0 {
				s[r.Key()] = vs[0]
			}
		}
		sets = append(sets, s)
		for _, set := range sets {
			if !sel.Matches(set) {
				continue
			}
			for _, term := range terms {
				if v, ok := set[term.Key]; !ok || !slices.Contains(term.Values, v) {
					t.Fatalf("%q matches %v, but the index term %v excludes it", selector, set, term)
				}
			}
		}
	})
}
