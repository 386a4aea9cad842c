package cli

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The commands quiet klog before anything logs; tests run commands in
	// parallel with servers that log, so they do it once up front.
	quietLogs()
	os.Exit(m.Run())
}
