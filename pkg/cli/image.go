package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
)

// ImageInfo is one cached image as the server lists it.
type ImageInfo struct {
	References []string
	Digest     string
	Size       int64
	Created    time.Time
}

// images calls the server's /knbox/v1/images endpoints.
type images struct {
	host string
	http *http.Client // no request timeout: archives are large
}

func (s *session) images() (*images, error) {
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	rc.Timeout = 0
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	return &images{host: strings.TrimSuffix(rc.Host, "/"), http: hc}, nil
}

// call does one request.
func (c *images) call(ctx context.Context, method, path string, body io.Reader, out interface{}) error {
	req, err := http.NewRequestWithContext(ctx, method, c.host+"/knbox/v1/images"+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-tar")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var st struct{ Message string }
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			return fmt.Errorf("%s", st.Message)
		}
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.Unmarshal(b, out)
}

// Load sends a `docker save` or OCI archive to the server's cache.
func (c *images) Load(ctx context.Context, r io.Reader) ([]string, error) {
	var out struct{ Loaded []string }
	err := c.call(ctx, http.MethodPost, "/load", r, &out)
	return out.Loaded, err
}

// List lists the server's cached images.
func (c *images) List(ctx context.Context) ([]ImageInfo, error) {
	var out []ImageInfo
	err := c.call(ctx, http.MethodGet, "", nil, &out)
	return out, err
}

// Prune removes the cached images no Revision runs.
func (c *images) Prune(ctx context.Context) (int64, error) {
	var out struct{ FreedBytes int64 }
	err := c.call(ctx, http.MethodPost, "/prune", nil, &out)
	return out.FreedBytes, err
}

func imageCommand(s *session) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage the server's image cache (load archives for offline use, list, prune)"}
	s.addFlags(cmd, false)
	load := &cobra.Command{
		Use:          "load FILE|-",
		Short:        "Import a `docker save` or OCI image archive; its tags then resolve without a registry",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
			var r = streams.In
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			c, err := s.images()
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd.Context())
			defer cancel()
			refs, err := c.Load(ctx, r)
			if err != nil {
				return err
			}
			for _, ref := range refs {
				fmt.Fprintf(streams.Out, "loaded %s\n", ref)
			}
			return nil
		}),
	}
	ls := &cobra.Command{
		Use:          "ls",
		Short:        "List the cached images",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: s.run(func(cmd *cobra.Command, _ []string, streams genericiooptions.IOStreams) error {
			c, err := s.images()
			if err != nil {
				return err
			}
			infos, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(streams.Out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(w, "REFERENCE\tDIGEST\tSIZE")
			for _, in := range infos {
				fmt.Fprintf(w, "%s\t%s\t%s\n", strings.Join(in.References, ","), in.Digest, humanBytes(in.Size))
			}
			return w.Flush()
		}),
	}
	prune := &cobra.Command{
		Use:          "prune",
		Short:        "Remove the cached images that no Revision runs",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: s.run(func(cmd *cobra.Command, _ []string, streams genericiooptions.IOStreams) error {
			c, err := s.images()
			if err != nil {
				return err
			}
			freed, err := c.Prune(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "freed %s\n", humanBytes(freed))
			return nil
		}),
	}
	cmd.AddCommand(load, ls, prune)
	return cmd
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
