package apiserver

import "time"

// SetGCPageSize sets how many objects a garbage collection pass reads at
// once, for the tests; restore puts the default back.
func SetGCPageSize(n int) (restore func()) {
	old := gcPageSize
	gcPageSize = n
	return func() { gcPageSize = old }
}

// SetBookmarkInterval sets how often watches may get a bookmark, for the
// tests; restore puts the default back.
func SetBookmarkInterval(d time.Duration) (restore func()) {
	old := bookmarkInterval
	bookmarkInterval = d
	return func() { bookmarkInterval = old }
}
