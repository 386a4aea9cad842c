package image

import (
	"context"
	"sync"
)

// flight runs one function per key at a time and shares its result with all
// callers that asked for the key while it ran (singleflight). The function
// runs on its own context, which is cancelled only when every caller waiting
// for it has given up, so one impatient caller does not fail the others.
type flight[T any] struct {
	mu    sync.Mutex
	calls map[string]*call[T]
}

type call[T any] struct {
	done    chan struct{}
	val     T
	err     error
	waiters int
	cancel  context.CancelFunc
}

// do calls fn for key unless a call for key is under way, and waits for the
// result or for ctx to end.
func (f *flight[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (T, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = make(map[string]*call[T])
	}
	c, ok := f.calls[key]
	if !ok {
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call[T]{done: make(chan struct{}), cancel: cancel}
		f.calls[key] = c
		go func() {
			defer cancel()
			c.val, c.err = fn(cctx)
			f.mu.Lock()
			if f.calls[key] == c {
				delete(f.calls, key)
			}
			f.mu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	f.mu.Unlock()

	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		f.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// Nobody wants the result any more: stop the work and let
			// the next caller start afresh.
			c.cancel()
			if f.calls[key] == c {
				delete(f.calls, key)
			}
		}
		f.mu.Unlock()
		var zero T
		return zero, ctx.Err()
	}
}
