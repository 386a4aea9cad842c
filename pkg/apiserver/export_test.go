package apiserver

// SetGCPageSize sets how many objects a garbage collection pass reads at
// once, for the tests; restore puts the default back.
func SetGCPageSize(n int) (restore func()) {
	old := gcPageSize
	gcPageSize = n
	return func() { gcPageSize = old }
}
