// Command imagepush is the last step of the e2e tests' builds: it turns a
// static binary that an earlier step left in the workspace into a
// one-layer image (the binary at /app, its entrypoint) and pushes it with
// go-containerregistry to the registry its argument names, as a builder
// image (ko, kaniko) would.
//
//	imagepush [-bin /workspace/app] [-env-file NAME=/workspace/file]... [REF]
//
// Without REF it pushes to $KNBOX_IMAGE, as the builder of `knbox deploy
// --source` does (the builder contract, README "Builds").
// Each -env-file sets NAME in the image's environment to the file's
// content (trimmed), so a test sees what the earlier steps wrote. Plain
// HTTP is used for loopback registries; credentials come from
// $DOCKER_CONFIG/config.json when there is one. It prints the pushed digest
// reference and writes it to /dev/termination-log.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type envFiles []string

func (e *envFiles) String() string     { return strings.Join(*e, ",") }
func (e *envFiles) Set(s string) error { *e = append(*e, s); return nil }

func main() {
	bin := flag.String("bin", "/workspace/app", "the static binary to put at /app")
	var envs envFiles
	flag.Var(&envs, "env-file", "NAME=PATH: NAME in the image's environment is the file's content")
	flag.Parse()
	ref := os.Getenv("KNBOX_IMAGE")
	if flag.NArg() == 1 {
		ref = flag.Arg(0)
	}
	if flag.NArg() > 1 || ref == "" {
		fail("usage: imagepush [-bin PATH] [-env-file NAME=PATH]... REF (or $KNBOX_IMAGE)")
	}
	if err := push(ref, *bin, envs); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	_ = os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
	os.Exit(1)
}

func push(refStr, bin string, envs []string) error {
	ref, err := name.ParseReference(refStr, name.Insecure)
	if err != nil {
		return fmt.Errorf("reference %q: %w", refStr, err)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read the binary: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range envs {
		k, path, ok := strings.Cut(e, "=")
		if !ok {
			return fmt.Errorf("-env-file %q: want NAME=PATH", e)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("-env-file %s: %w", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(b)))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{"/app"}, Env: env}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	// Credentials as docker, crane and ko find them: $DOCKER_CONFIG (knbox
	// gives build steps one for its embedded registry).
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	out := ref.Context().Digest(d.String()).String()
	fmt.Println("pushed", out)
	return os.WriteFile("/dev/termination-log", []byte(out), 0o644)
}
