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
)

// ImageInfo is one cached image as the server lists it.
type ImageInfo struct {
	References []string
	Digest     string
	Size       int64
	Created    time.Time
}

// imageCall does one request to the server's /knbox/v1/images endpoints.
func (c *Client) imageCall(ctx context.Context, method, path string, body io.Reader, out interface{}) error {
	req, err := http.NewRequestWithContext(ctx, method, c.config.Host+"/knbox/v1/images"+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-tar")
	}
	resp, err := c.watchHTTP.Do(req) // no request timeout: archives are large
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

// ImageLoad sends a `docker save` or OCI archive to the server's cache.
func (c *Client) ImageLoad(ctx context.Context, r io.Reader) ([]string, error) {
	var out struct{ Loaded []string }
	err := c.imageCall(ctx, http.MethodPost, "/load", r, &out)
	return out.Loaded, err
}

// ImageList lists the server's cached images.
func (c *Client) ImageList(ctx context.Context) ([]ImageInfo, error) {
	var out []ImageInfo
	err := c.imageCall(ctx, http.MethodGet, "", nil, &out)
	return out, err
}

// ImagePrune removes the cached images no Revision runs.
func (c *Client) ImagePrune(ctx context.Context) (int64, error) {
	var out struct{ FreedBytes int64 }
	err := c.imageCall(ctx, http.MethodPost, "/prune", nil, &out)
	return out.FreedBytes, err
}

func imageCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage the server's image cache (load archives for offline use, list, prune)"}
	conn := addConnFlags(cmd, false)
	load := &cobra.Command{
		Use:          "load FILE|-",
		Short:        "Import a `docker save` or OCI image archive; its tags then resolve without a registry",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			c, err := conn.client()
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd.Context())
			defer cancel()
			refs, err := c.ImageLoad(ctx, r)
			if err != nil {
				return err
			}
			for _, ref := range refs {
				fmt.Fprintf(cmd.OutOrStdout(), "loaded %s\n", ref)
			}
			return nil
		},
	}
	ls := &cobra.Command{
		Use:          "ls",
		Short:        "List the cached images",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			infos, err := c.ImageList(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 3, ' ', 0)
			fmt.Fprintln(w, "REFERENCE\tDIGEST\tSIZE")
			for _, in := range infos {
				fmt.Fprintf(w, "%s\t%s\t%s\n", strings.Join(in.References, ","), in.Digest, humanBytes(in.Size))
			}
			return w.Flush()
		},
	}
	prune := &cobra.Command{
		Use:          "prune",
		Short:        "Remove the cached images that no Revision runs",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			freed, err := c.ImagePrune(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "freed %s\n", humanBytes(freed))
			return nil
		},
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
