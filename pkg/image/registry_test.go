package image

import (
	"strings"
	"testing"
)

// FuzzParseManifest: any manifest is refused or yields sha256 references
// within the limits.
func FuzzParseManifest(f *testing.F) {
	d := "sha256:" + strings.Repeat("a", 64)
	for _, s := range []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + d + `","size":2},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + d + `","size":10}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d + `","size":10}]}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"digest":"` + d + `","size":-1}}`,
		`{"schemaVersion":1}`, `{`, `[]`, `null`, `{"schemaVersion":2,"config":{"digest":"sha256:../../x","size":1}}`,
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "application/vnd.oci.image.manifest.v1+json")
	}
	lim := Limits{MaxLayers: 4, MaxLayerBytes: 1 << 20, MaxConfigBytes: 1 << 10, MaxManifestBytes: 1 << 14}
	f.Fuzz(func(t *testing.T, raw []byte, ct string) {
		mt, refs, err := ParseManifest(raw, ct, lim)
		if err != nil {
			return
		}
		if mt == "" {
			t.Fatal("accepted without a media type")
		}
		if len(refs) > maxIndexEntries+1 {
			t.Fatalf("%d references", len(refs))
		}
		for _, r := range refs {
			if !ValidDigest(r.Digest) || r.Size < 0 || r.Size > lim.MaxLayerBytes {
				t.Fatalf("reference %+v accepted", r)
			}
		}
	})
}

func TestValidNames(t *testing.T) {
	for _, c := range []struct {
		repo string
		ok   bool
	}{
		{"ns/app", true}, {"ns/a.b/c-d/e__f", true}, {"ns/../x", false}, {"ns/./x", false}, {"ns/_x", false},
		{"NS/app", false}, {"ns//app", false}, {"/ns/app", false}, {"ns/app/", false}, {strings.Repeat("a", 256), false},
	} {
		if got := ValidRepository(c.repo); got != c.ok {
			t.Errorf("ValidRepository(%q) = %v", c.repo, got)
		}
	}
}
