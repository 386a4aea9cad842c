// Command sampleimage builds examples/helloworld into a one-layer image and
// writes it as a `docker save` archive tagged SampleImage, for
// `knbox image load`: `make run` loads it so that examples/hello.yaml runs
// without a registry.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// sampleImage is the tag examples/hello.yaml names.
const sampleImage = "knbox.local/samples/helloworld-go:latest"

func main() {
	out := flag.String("o", "_output/helloworld.tar", "where to write the archive")
	flag.Parse()
	if err := build(*out); err != nil {
		fmt.Fprintln(os.Stderr, "sampleimage:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s\n", *out, sampleImage)
}

func build(out string) error {
	dir, err := os.MkdirTemp("", "knbox-sampleimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/knbox/knbox/examples/helloworld")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH // built for this machine
	cf.Config = v1.Config{Entrypoint: []string{"/hello"}, User: "65532"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(sampleImage)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
