package image

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/knbox/knbox/pkg/disk"
)

// Limits bound what an image may take. Zero values are the documented
// defaults; the names of the configuration keys (limits.images.*) are in the
// errors, so that an operator knows what to raise.
type Limits struct {
	// MaxLayerBytes bounds a layer's unpacked size, counted as the lengths
	// of its files (holes of sparse files included: a 3.5 KiB layer can
	// declare a file of 4 GiB), and its compressed size.
	// DefaultMaxLayerBytes if zero.
	MaxLayerBytes int64
	// MaxImageBytes bounds the unpacked size of all of an image's layers
	// (DefaultMaxImageBytes).
	MaxImageBytes int64
	// MaxLayerFiles and MaxImageFiles bound the entries of a layer and of
	// an image (DefaultMaxLayerFiles, DefaultMaxImageFiles).
	MaxLayerFiles int64
	MaxImageFiles int64
	// MaxLayers bounds an image's layers (DefaultMaxLayers).
	MaxLayers int
	// MaxConfigBytes and MaxManifestBytes bound an image's config and its
	// manifest or index (DefaultMaxConfigBytes, DefaultMaxManifestBytes).
	MaxConfigBytes   int64
	MaxManifestBytes int64
	// MinFreeBytes is kept free on the cache's file system: a pull that
	// would go below fails (DefaultMinFreeBytes; negative: no check).
	MinFreeBytes int64
	// PullBackoff is how long a layer that failed verification or a limit
	// is not fetched again; it doubles with each failure up to
	// MaxPullBackoff (DefaultPullBackoff, DefaultMaxPullBackoff: the
	// kubelet's image pull backoff).
	PullBackoff    time.Duration
	MaxPullBackoff time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxLayerBytes    = 4 << 30
	DefaultMaxImageBytes    = 8 << 30
	DefaultMaxLayerFiles    = 250000
	DefaultMaxImageFiles    = 500000
	DefaultMaxLayers        = 127
	DefaultMaxConfigBytes   = 8 << 20
	DefaultMaxManifestBytes = 4 << 20
	DefaultMinFreeBytes     = 256 << 20
	DefaultPullBackoff      = 10 * time.Second
	DefaultMaxPullBackoff   = 5 * time.Minute
)

func (l Limits) withDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxLayerBytes, DefaultMaxLayerBytes)
	def(&l.MaxImageBytes, DefaultMaxImageBytes)
	def(&l.MaxLayerFiles, DefaultMaxLayerFiles)
	def(&l.MaxImageFiles, DefaultMaxImageFiles)
	def(&l.MaxConfigBytes, DefaultMaxConfigBytes)
	def(&l.MaxManifestBytes, DefaultMaxManifestBytes)
	def(&l.MinFreeBytes, DefaultMinFreeBytes)
	if l.MaxLayers == 0 {
		l.MaxLayers = DefaultMaxLayers
	}
	if l.PullBackoff == 0 {
		l.PullBackoff = DefaultPullBackoff
	}
	if l.MaxPullBackoff == 0 {
		l.MaxPullBackoff = DefaultMaxPullBackoff
	}
	return l
}

// contentError is a failure caused by an image's content (a digest or size
// that does not match, a limit exceeded, an entry refused): fetching the
// same blob again gives it again, so the blob is backed off.
type contentError struct{ err error }

func (e *contentError) Error() string { return e.err.Error() }
func (e *contentError) Unwrap() error { return e.err }

func contentErrorf(format string, args ...any) error {
	return &contentError{err: fmt.Errorf(format, args...)}
}

func isContentError(err error) bool {
	var ce *contentError
	return errors.As(err, &ce)
}

// imageBudget is what the layers of one image unpacked so far took; the
// layers unpack in parallel.
type imageBudget struct {
	maxBytes, maxFiles int64
	bytes, files       atomic.Int64
}

// layerBudget counts one layer's entries and bytes against the limits of
// the layer and of its image, and checks the disk as bytes are written.
type layerBudget struct {
	maxBytes, maxFiles int64
	image              *imageBudget
	// checkDisk is called every diskCheckEvery bytes written; nil: never.
	checkDisk func() error

	bytes, files int64
	unchecked    int64 // written since the last disk check
	// archive, when set, names what is unpacked and the keys of its
	// limits (an archive that is not a layer: UnpackArchive).
	archive *archiveKeys
}

// archiveKeys name an archive and the configuration keys of its limits.
type archiveKeys struct{ what, filesKey, bytesKey string }

// diskCheckEvery is how many bytes a layer writes between checks of the
// free space.
const diskCheckEvery = 32 << 20

// entry counts one tar entry of size bytes (its length, holes included).
func (b *layerBudget) entry(size int64) error {
	if b == nil {
		return nil
	}
	b.files++
	b.bytes += size
	if a := b.archive; a != nil {
		if b.files > b.maxFiles {
			return contentErrorf("more than %d files in the %s (%s)", b.maxFiles, a.what, a.filesKey)
		}
		if b.bytes > b.maxBytes {
			return contentErrorf("more than %s unpacked from the %s (%s; sparse files count their full length)", disk.Bytes(b.maxBytes), a.what, a.bytesKey)
		}
		return nil
	}
	if b.files > b.maxFiles {
		return contentErrorf("more than %d files in the layer (limits.images.maxLayerFiles)", b.maxFiles)
	}
	if b.bytes > b.maxBytes {
		return contentErrorf("more than %s unpacked in the layer (limits.images.maxLayerBytes; sparse files count their full length)", disk.Bytes(b.maxBytes))
	}
	if im := b.image; im != nil {
		if n := im.files.Add(1); n > im.maxFiles {
			return contentErrorf("more than %d files in the image (limits.images.maxImageFiles)", im.maxFiles)
		}
		if n := im.bytes.Add(size); n > im.maxBytes {
			return contentErrorf("more than %s unpacked in the image (limits.images.maxImageBytes; sparse files count their full length)", disk.Bytes(im.maxBytes))
		}
	}
	return nil
}

// written notes n bytes written to disk.
func (b *layerBudget) written(n int64) error {
	if b == nil || b.checkDisk == nil {
		return nil
	}
	b.unchecked += n
	if b.unchecked < diskCheckEvery {
		return nil
	}
	b.unchecked = 0
	return b.checkDisk()
}

// blockSize is the unit in which runs of zeros become holes.
const blockSize = 4096

var zeroBlock [blockSize]byte

// sparseWriter writes a regular file's content, leaving holes where whole
// aligned blocks are zero, so a sparse file (or a file of zeros) takes no
// disk blocks for them. A block split across writes is held until it is
// whole. finish writes what is held and sets the file's length.
type sparseWriter struct {
	f      *os.File
	off    int64 // where the next byte goes (pend included)
	pend   []byte
	budget *layerBudget
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(w.pend) > 0 {
		// Complete the held block first.
		c := min(blockSize-len(w.pend), len(p))
		w.pend = append(w.pend, p[:c]...)
		p = p[c:]
		w.off += int64(c)
		if len(w.pend) < blockSize {
			return n, nil
		}
		if err := w.put(w.pend, w.off-blockSize); err != nil {
			return 0, err
		}
		w.pend = w.pend[:0]
	}
	// Whole blocks, from an aligned offset (held bytes make w.off aligned,
	// and the file starts aligned).
	whole := len(p) - len(p)%blockSize
	if err := w.put(p[:whole], w.off); err != nil {
		return 0, err
	}
	w.off += int64(whole)
	w.pend = append(w.pend, p[whole:]...)
	w.off += int64(len(p) - whole)
	return n, nil
}

// put writes whole blocks b at off, skipping those that are all zeros and
// writing each run of the others at once.
func (w *sparseWriter) put(b []byte, off int64) error {
	for len(b) > 0 {
		i := 0
		for i < len(b) && !bytes.Equal(b[i:i+blockSize], zeroBlock[:]) {
			i += blockSize
		}
		if i == 0 {
			b, off = b[blockSize:], off+blockSize
			continue
		}
		if _, err := w.f.WriteAt(b[:i], off); err != nil {
			return err
		}
		if err := w.budget.written(int64(i)); err != nil {
			return err
		}
		b, off = b[i:], off+int64(i)
	}
	return nil
}

// finish writes the last, partial block (unless it is zeros) and gives the
// file its full length, trailing holes included.
func (w *sparseWriter) finish() error {
	if len(w.pend) > 0 && !bytes.Equal(w.pend, zeroBlock[:len(w.pend)]) {
		if _, err := w.f.WriteAt(w.pend, w.off-int64(len(w.pend))); err != nil {
			return err
		}
	}
	w.pend = w.pend[:0]
	return w.f.Truncate(w.off)
}

// backoff remembers the blobs whose content failed, so that they are not
// fetched again in a loop: each failure doubles the wait.
type backoff struct {
	mu       sync.Mutex
	first    time.Duration
	max      time.Duration
	failures map[string]*failure // by blob digest
	now      func() time.Time
}

type failure struct {
	err   error
	at    time.Time
	count int
}

// maxRemembered bounds the failures remembered; the oldest go first.
const maxRemembered = 1024

// wait returns why digest may not be fetched now, or nil.
func (b *backoff) wait(digest string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.failures[digest]
	if !ok {
		return nil
	}
	d := b.first
	for i := 1; i < f.count && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	left := f.at.Add(d).Sub(b.now())
	if left <= 0 {
		return nil
	}
	return &contentError{err: fmt.Errorf("%w (%s ago; not fetched again for %s)", f.err, b.now().Sub(f.at).Round(time.Second), left.Round(time.Second))}
}

// fail records a failure of digest.
func (b *backoff) fail(digest string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures == nil {
		b.failures = map[string]*failure{}
	}
	f, ok := b.failures[digest]
	if !ok {
		if len(b.failures) >= maxRemembered {
			var oldest string
			for d, g := range b.failures {
				if oldest == "" || g.at.Before(b.failures[oldest].at) {
					oldest = d
				}
			}
			delete(b.failures, oldest)
		}
		f = &failure{}
		b.failures[digest] = f
	}
	f.err, f.at = err, b.now()
	f.count++
}

// succeed forgets digest's failures.
func (b *backoff) succeed(digest string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, digest)
}
