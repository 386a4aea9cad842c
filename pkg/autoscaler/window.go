package autoscaler

import "time"

// maxWindow is the running maximum of the values recorded in the last
// window of time: the scale-down delay. It keeps only the values that can
// still become the maximum (times ascending, values strictly descending), so
// recording is amortised O(1) and the storage is reused.
type maxWindow struct {
	window  time.Duration
	entries []maxEntry
}

type maxEntry struct {
	at time.Time
	v  int32
}

// record adds v at now and returns the maximum of the values recorded in
// (now-window, now].
func (w *maxWindow) record(now time.Time, v int32) int32 {
	cut := now.Add(-w.window)
	drop := 0
	for drop < len(w.entries) && !w.entries[drop].at.After(cut) {
		drop++
	}
	if drop > 0 {
		w.entries = w.entries[:copy(w.entries, w.entries[drop:])]
	}
	for len(w.entries) > 0 && w.entries[len(w.entries)-1].v <= v {
		w.entries = w.entries[:len(w.entries)-1]
	}
	w.entries = append(w.entries, maxEntry{at: now, v: v})
	return w.entries[0].v
}
