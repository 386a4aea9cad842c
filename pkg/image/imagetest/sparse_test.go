package imagetest_test

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"

	"github.com/knbox/knbox/pkg/image/imagetest"
)

func TestSparseFileLayer(t *testing.T) {
	data := imagetest.Layer(t, imagetest.File{Path: "big", SparseSize: 1 << 20, Body: []byte("end")}, imagetest.File{Path: "after", Body: []byte("x")})
	tr := tar.NewReader(bytes.NewReader(data))
	h, err := tr.Next()
	if err != nil || h.Name != "big" || h.Size != 1<<20 {
		t.Fatalf("%+v %v (%d bytes of layer)", h, err, len(data))
	}
	b, _ := io.ReadAll(tr)
	if len(b) != 1<<20 || string(b[len(b)-3:]) != "end" {
		t.Fatalf("%d bytes", len(b))
	}
	h, err = tr.Next()
	if err != nil || h.Name != "after" {
		t.Fatalf("%+v %v", h, err)
	}
	t.Logf("layer of %d bytes", len(data))
}
