package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func TestRevisionName(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := []struct {
		name, template string
		gen            int64
		want           string
	}{
		{"hello", "", 1, "hello-00001"},
		{"hello", "", 123456, "hello-123456"},
		{"hello", "hello-mine", 7, "hello-mine"},
	}
	for _, c := range cases {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: c.name, Generation: c.gen}}
		cfg.Spec.Template.Name = c.template
		if got := revisionName(cfg); got != c.want {
			t.Errorf("revisionName(%s, gen %d, template %q) = %q, want %q", c.name, c.gen, c.template, got, c.want)
		}
	}
	// Past 63 characters the name is shortened with a hash, stays unique
	// per generation, and is a valid DNS label.
	seen := map[string]bool{}
	for gen := int64(1); gen <= 3; gen++ {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: long, Generation: gen}}
		got := revisionName(cfg)
		if len(got) > 63 || seen[got] {
			t.Errorf("long name %q (len %d) not shortened uniquely", got, len(got))
		}
		seen[got] = true
	}
}
