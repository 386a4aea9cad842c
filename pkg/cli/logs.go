package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

var (
	servingGV    = schema.GroupVersion{Group: "serving.knative.dev", Version: "v1"}
	servicesGVR  = servingGV.WithResource("services")
	revisionsGVR = servingGV.WithResource("revisions")
)

// logsOptions select what logs streams.
type logsOptions struct {
	revision string        // "" = the service's latest ready (else latest created) revision
	build    string        // a Build's steps instead of a service's revision
	follow   bool          // keep streaming new lines
	since    time.Duration // only lines newer than this (0: all)
}

func logsCommand(s *session) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:          "logs (SERVICE [--revision R] | --build B) [-f] [--since DURATION]",
		Short:        "Show the logs of a service's revision (stdout, stderr and syslog of its instances) or of a build's steps",
		Example:      "  knbox logs hello -f\n  knbox logs hello --revision hello-00002 --since 10m\n  knbox logs --build hello-00003",
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	cmd.Flags().StringVar(&o.revision, "revision", "", "revision to show (default: the latest ready one)")
	cmd.Flags().StringVar(&o.build, "build", "", "show the output of this Build's steps (build.knative.dev) instead")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep streaming new lines")
	cmd.Flags().DurationVar(&o.since, "since", 0, "only lines newer than this, e.g. 10m")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		switch {
		case o.build != "" && (len(args) > 0 || o.revision != ""):
			return errors.New("--build shows a Build's logs: name no service or revision with it")
		case o.build != "":
			return s.buildLogs(ctx, streams.Out, o)
		case len(args) == 0:
			return errors.New("name a service (or a Build with --build)")
		}
		return s.logs(ctx, streams.Out, args[0], o)
	})
	return cmd
}

// logs streams the logs of a service's revision (stdout, stderr and
// /dev/log of its instances) from the revisions/NAME/log subresource.
func (s *session) logs(ctx context.Context, w io.Writer, service string, o logsOptions) error {
	ns, _, err := s.conn.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	rev := o.revision
	if rev == "" {
		svc, err := dyn.Resource(servicesGVR).Namespace(ns).Get(ctx, service, metav1.GetOptions{})
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
	} else if _, err := dyn.Resource(revisionsGVR).Namespace(ns).Get(ctx, rev, metav1.GetOptions{}); err != nil {
		return err
	}
	client, err := servingREST(rc, o.follow)
	if err != nil {
		return err
	}
	req := client.Get().Namespace(ns).Resource("revisions").Name(rev).SubResource("log")
	if o.follow {
		req = req.Param("follow", "true")
	}
	if o.since > 0 {
		req = req.Param("sinceSeconds", strconv.FormatInt(int64(o.since.Seconds()), 10))
	}
	return stream(ctx, w, req, "revision "+rev)
}

// buildLogs streams the output of a Build's steps from the builds/NAME/log
// subresource.
func (s *session) buildLogs(ctx context.Context, w io.Writer, o logsOptions) error {
	ns, _, err := s.conn.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return err
	}
	req, err := buildLogRequest(rc, ns, o.build, o)
	if err != nil {
		return err
	}
	return stream(ctx, w, req, "build "+o.build)
}

// buildLogRequest is the GET of builds/NAME/log with o's follow and since.
func buildLogRequest(rc *rest.Config, ns, name string, o logsOptions) (*rest.Request, error) {
	cfg := rest.CopyConfig(rc)
	cfg.GroupVersion = &buildGV
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if o.follow {
		cfg.Timeout = 0
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req := client.Get().Namespace(ns).Resource("builds").Name(name).SubResource("log")
	if o.follow {
		req = req.Param("follow", "true")
	}
	if o.since > 0 {
		req = req.Param("sinceSeconds", strconv.FormatInt(int64(o.since.Seconds()), 10))
	}
	return req, nil
}

var buildGV = schema.GroupVersion{Group: "build.knative.dev", Version: "v1alpha1"}

// stream copies a log subresource's body to w until it ends or ctx does.
func stream(ctx context.Context, w io.Writer, req *rest.Request, what string) error {
	body, err := req.Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", what, err)
	}
	defer body.Close()
	_, err = io.Copy(w, body)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// servingREST is a REST client of serving.knative.dev/v1; a stream has no
// request timeout.
func servingREST(rc *rest.Config, stream bool) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(rc)
	cfg.GroupVersion = &servingGV
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if stream {
		cfg.Timeout = 0
	}
	return rest.RESTClientFor(cfg)
}
