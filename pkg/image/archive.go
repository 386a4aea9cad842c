package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
)

// ArchiveLimits bound what UnpackArchive writes; the keys name the
// configuration that sets them, for the error messages.
type ArchiveLimits struct {
	// What the archive is ("source archive").
	What string
	// MaxBytes and MaxFiles bound the unpacked size (sparse files count
	// their full length) and the number of entries.
	MaxBytes, MaxFiles int64
	// BytesKey and FilesKey are the configuration keys of the bounds.
	BytesKey, FilesKey string
}

// UnpackArchive extracts a tar archive, plain or gzip-compressed (by its
// first bytes), into dir (an existing directory), as safely as an image
// layer is unpacked: no entry leaves dir (".." is refused, a symlink is
// never written through, hard links stay inside), device nodes are
// skipped, and the limits are enforced while it reads. A refusal says why
// and wraps no I/O error of the host.
func UnpackArchive(ctx context.Context, dir string, r io.Reader, l ArchiveLimits) error {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(2)
	var in io.Reader = br
	if bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", l.What, err)
		}
		defer zr.Close()
		in = zr
	}
	b := &layerBudget{maxBytes: l.MaxBytes, maxFiles: l.MaxFiles,
		archive: &archiveKeys{what: l.What, filesKey: l.FilesKey, bytesKey: l.BytesKey}}
	if err := unpack(ctx, dir, in, b); err != nil {
		return fmt.Errorf("%s: %w", l.What, err)
	}
	return nil
}
