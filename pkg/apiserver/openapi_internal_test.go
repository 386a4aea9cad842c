package apiserver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOpenAPIDefinitionsUpToDate: the embedded definitions are what go
// generate makes from the modules in go.mod (run `go generate
// ./pkg/apiserver` after changing them).
func TestOpenAPIDefinitionsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go run")
	}
	out := filepath.Join(t.TempDir(), "defs.json")
	cmd := exec.Command("go", "run", "./internal/openapigen", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openapigen: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, definitionsJSON) {
		t.Error("openapi_definitions.json is stale: run go generate ./pkg/apiserver")
	}
}

// TestEveryKindHasASchema: every stored kind has a definition in its
// storage version, so it can be explained and server-side applied.
func TestEveryKindHasASchema(t *testing.T) {
	m, err := loadModels()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{kinds: DefaultKinds(SeedVersions())}
	for _, k := range s.kinds.All() {
		if k.Virtual {
			continue
		}
		if _, ok := m.byGVK[k.GroupVersion().WithKind(k.Kind)]; !ok {
			t.Errorf("%s has no OpenAPI definition", k.GroupVersion().WithKind(k.Kind))
		}
		if _, err := s.fieldManager(k, ""); err != nil {
			t.Errorf("%s: field manager: %v", k.Kind, err)
		}
	}
}
