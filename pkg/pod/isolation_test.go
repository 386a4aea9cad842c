package pod

import (
	"strings"
	"testing"
	"time"
)

// TestProcessRefusesRootWithTheField: a pod that would run as root under
// the process handler (which does not isolate) fails with
// CreateContainerConfigError naming the field that made it root, without
// the operator's policy saying so.
func TestProcessRefusesRootWithTheField(t *testing.T) {
	requireHandler(t, "process")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"process"})
	id := uniqueName("root-process")
	e.run(e.spec(id, "process", ref, func(s *Spec) { s.Security = nil })) // e.spec runs process pods as nobody
	st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonCreateContainerConfig))
	if f := st.LastFailure; !strings.Contains(f.Message, "image.user") || !strings.Contains(f.Message, "process runtime") {
		t.Errorf("failure %+v, want the message to name image.user and the process runtime", f)
	}
}
