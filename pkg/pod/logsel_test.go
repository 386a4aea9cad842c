package pod

import (
	"testing"

	"github.com/knbox/knbox/pkg/logs"
)

func TestContainerLinesAndRunEnded(t *testing.T) {
	sel := ContainerLines("app", 2)
	for _, tc := range []struct {
		in, out string
		keep    bool
	}{
		{"[app] hello", "hello", true},
		{"[side] hello", "[side] hello", false},
		{"knbox: container app exited (exit code 1)", "knbox: container app exited (exit code 1)", true},
		{"[not a tag", "[not a tag", true},
	} {
		r := &logs.Record{Msg: []byte(tc.in)}
		if keep := sel(r); keep != tc.keep || string(r.Msg) != tc.out {
			t.Errorf("%q: %v %q, want %v %q", tc.in, keep, r.Msg, tc.keep, tc.out)
		}
	}
	if ContainerLines("app", 1) != nil {
		t.Error("one container: a selection")
	}
	for in, want := range map[string]bool{
		"knbox: the container exited (exit code 3): boom":                  true,
		"knbox: liveness probe failed, restarting the container: HTTP 500": true,
		"the container exited (exit code 3)":                               false,
		"knbox: something else":                                            false,
	} {
		if got := RunEnded(&logs.Record{Msg: []byte(in)}); got != want {
			t.Errorf("RunEnded(%q) = %v", in, got)
		}
	}
}
