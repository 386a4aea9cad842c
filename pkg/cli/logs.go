package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	servicesGVR  = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	revisionsGVR = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "revisions"}
)

// LogsOptions select what Logs streams.
type LogsOptions struct {
	Revision string        // "" = the service's latest ready (else latest created) revision
	Follow   bool          // keep streaming new lines
	Since    time.Duration // only lines newer than this (0: all)
}

// Logs streams the logs of a service's revision (stdout, stderr and
// /dev/log of its instances) from the revisions/NAME/log subresource.
func (c *Client) Logs(ctx context.Context, w io.Writer, service string, o LogsOptions) error {
	rev := o.Revision
	if rev == "" {
		svc, err := c.dyn.Resource(servicesGVR).Namespace(c.Namespace).Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rev, _, _ = unstructured.NestedString(svc.Object, "status", "latestReadyRevisionName")
		if rev == "" {
			rev, _, _ = unstructured.NestedString(svc.Object, "status", "latestCreatedRevisionName")
		}
		if rev == "" {
			return fmt.Errorf("service %q has no revision yet", service)
		}
	} else if _, err := c.dyn.Resource(revisionsGVR).Namespace(c.Namespace).Get(ctx, rev, metav1.GetOptions{}); err != nil {
		return err
	}
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Since > 0 {
		q.Set("sinceSeconds", strconv.FormatInt(int64(o.Since.Seconds()), 10))
	}
	u := fmt.Sprintf("%s/apis/serving.knative.dev/v1/namespaces/%s/revisions/%s/log?%s",
		c.config.Host, url.PathEscape(c.Namespace), url.PathEscape(rev), q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	hc := c.http
	if o.Follow {
		hc = c.watchHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("logs of revision %s: %s: %s", rev, resp.Status, b)
	}
	_, err = io.Copy(w, resp.Body)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func logsCommand() *cobra.Command {
	var o LogsOptions
	cmd := &cobra.Command{
		Use:          "logs SERVICE [--revision R] [-f] [--since DURATION]",
		Short:        "Show the logs of a service's revision (stdout, stderr and syslog of its instances)",
		Example:      "  knbox logs hello -f\n  knbox logs hello --revision hello-00002 --since 10m",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
	}
	conn := addConnFlags(cmd, true)
	cmd.Flags().StringVar(&o.Revision, "revision", "", "revision to show (default: the latest ready one)")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep streaming new lines")
	cmd.Flags().DurationVar(&o.Since, "since", 0, "only lines newer than this, e.g. 10m")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := conn.client()
		if err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		return c.Logs(ctx, cmd.OutOrStdout(), args[0], o)
	}
	return cmd
}
