package daemon

import (
	"slices"
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/runtime"
)

// TestRuntimeHandlersAndDisabled: process is not enabled by default (its
// RuntimeClass goes), and its RuntimeClass, once enabled, says that it does
// not isolate.
func TestRuntimeHandlersAndDisabled(t *testing.T) {
	if got := disabledRuntimes(config.Default()); !slices.Equal(got, []string{"process"}) {
		t.Errorf("disabled by default: %v, want [process]", got)
	}
	hs := runtimeHandlers(map[string]runtime.Handler{"process": runtime.NewProcess(t.TempDir())})
	if len(hs) != 1 || hs[0].Name != "process" || !strings.Contains(hs[0].Unisolated, "does not isolate") {
		t.Errorf("process handler: %+v", hs)
	}
	var _ controller.RuntimeHandler = hs[0]
}

// TestContainerPolicy: the config's policy reaches oci.Policy, unset lists
// stay unset (oci's defaults), empty lists stay empty, and an unknown
// capability is an error naming the key.
func TestContainerPolicy(t *testing.T) {
	p, err := containerPolicy(config.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultCapabilities != nil || p.AddableCapabilities != nil || p.RefuseRoot || p.Unconfined || p.OpenFiles == 0 || p.OpenFiles > oci.DefaultOpenFiles {
		t.Errorf("defaults: %+v", p)
	}
	p, err = containerPolicy(config.Policy{RefuseRoot: true, SeccompProfile: config.SeccompUnconfined, PidsLimit: 100,
		DefaultCapabilities: []string{}, AddableCapabilities: []string{"net_raw"}, MaskedPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.RefuseRoot || !p.Unconfined || p.PidsLimit != 100 || p.DefaultCapabilities == nil || len(p.DefaultCapabilities) != 0 ||
		!slices.Equal(p.AddableCapabilities, []string{"CAP_NET_RAW"}) || p.MaskedPaths == nil {
		t.Errorf("set: %+v", p)
	}
	if _, err := containerPolicy(config.Policy{AddableCapabilities: []string{"KILL", "FLY"}}); err == nil || !strings.Contains(err.Error(), "policy.addableCapabilities[1]") {
		t.Errorf("unknown capability: %v", err)
	}
}
