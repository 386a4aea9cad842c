package pod

import (
	"os"
	"testing"
)

// TestMain lets the test binary be a pod's shim too (`<test binary> shim
// ...`), as knbox is (`knbox shim ...`), so that the tests run pods under
// real shims.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(ShimMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// shimCommand is how the tests' Runtimes start shims.
func shimCommand() []string { return []string{os.Args[0], "shim"} }
