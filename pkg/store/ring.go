package store

// ring holds the most recent events. Every revision produces exactly one
// event, so the events in the ring have consecutive revisions and the one
// with revision r sits at a computable index.
type ring struct {
	buf   []Event
	start int // index of the oldest event
	n     int // number of events held
}

func newRing(capacity int) ring { return ring{buf: make([]Event, capacity)} }

func (r *ring) capacity() int { return len(r.buf) }

// push appends ev, dropping the oldest event when full.
func (r *ring) push(ev Event) {
	if len(r.buf) == 0 {
		return
	}
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = ev
		r.n++
		return
	}
	r.buf[r.start] = ev
	r.start = (r.start + 1) % len(r.buf)
}

// first is the revision of the oldest event held, or 0 when empty.
func (r *ring) first() int64 {
	if r.n == 0 {
		return 0
	}
	return r.buf[r.start].Entry.Revision
}

// since appends to dst the events with revision > from that match f.
func (r *ring) since(dst []Event, from int64, f filter) []Event {
	if r.n == 0 {
		return dst
	}
	skip := max(from-r.first()+1, 0)
	for i := int(min(skip, int64(r.n))); i < r.n; i++ {
		if ev := r.buf[(r.start+i)%len(r.buf)]; f.match(ev.Entry.Key) {
			dst = append(dst, ev)
		}
	}
	return dst
}
