package store

// ring holds the most recent events with their values, at most capacity
// events and maxBytes bytes of values. Every revision produces exactly one
// event, so the events in the ring have consecutive revisions and the one
// with revision r sits at a computable index. Events in the ring hold no
// Prev of their own: since gives them the value of the ring's event that
// wrote it, when the ring has it.
type ring struct {
	buf      []Event
	start    int // index of the oldest event
	n        int // number of events held
	bytes    int64
	maxBytes int64
	next     int64 // the revision after the last event pushed
}

func newRing(capacity int, maxBytes int64) ring {
	return ring{buf: make([]Event, capacity), maxBytes: maxBytes}
}

func (r *ring) capacity() int { return len(r.buf) }

// push appends ev, dropping the oldest events while the ring holds more
// than its capacity or its bytes. An event larger than all the bytes of the
// ring empties it.
func (r *ring) push(ev Event) {
	if len(r.buf) == 0 {
		return
	}
	if r.n == len(r.buf) {
		r.drop()
	}
	r.buf[(r.start+r.n)%len(r.buf)] = ev
	r.n++
	r.bytes += int64(len(ev.Entry.Value))
	r.next = ev.Entry.Revision + 1
	for r.n > 0 && r.bytes > r.maxBytes {
		r.drop()
	}
}

// drop removes the oldest event.
func (r *ring) drop() {
	r.bytes -= int64(len(r.buf[r.start].Entry.Value))
	r.buf[r.start] = Event{} // let its bytes go
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// first is the revision of the oldest event held; when the ring is empty,
// the revision after the last event pushed (0 before any): the ring holds
// every event from first on.
func (r *ring) first() int64 {
	if r.n == 0 {
		return r.next
	}
	return r.buf[r.start].Entry.Revision
}

// at returns the event with revision rev, if the ring holds it.
func (r *ring) at(rev int64) (Event, bool) {
	i := rev - r.first()
	if r.n == 0 || i < 0 || i >= int64(r.n) {
		return Event{}, false
	}
	return r.buf[(r.start+int(i))%len(r.buf)], true
}

// since appends to dst the events with revision > from that match f, each
// with its Prev when the ring holds the event that wrote it (else Prev is
// nil: see prevFromLog).
func (r *ring) since(dst []Event, from int64, f filter) []Event {
	if r.n == 0 {
		return dst
	}
	skip := max(from-r.first()+1, 0)
	for i := int(min(skip, int64(r.n))); i < r.n; i++ {
		ev := r.buf[(r.start+i)%len(r.buf)]
		if !f.match(ev.Entry.Key) {
			continue
		}
		if old, ok := r.at(ev.prevRev); ok && ev.prevRev > 0 && old.Entry.Key == ev.Entry.Key {
			ev.Prev = old.Entry.Value
		}
		dst = append(dst, ev)
	}
	return dst
}

// clear drops every event held, keeping the revision the next one will
// have: the ring then holds every event from that revision on.
func (r *ring) clear() {
	for r.n > 0 {
		r.drop()
	}
}
