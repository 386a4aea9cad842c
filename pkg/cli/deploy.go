package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/kubeclient"
)

// deployOptions are the flags of `knbox deploy`.
type deployOptions struct {
	image   string
	source  string
	builder string
	env     []string
	traffic []string
	tags    []string
	timeout time.Duration
	noWait  bool
}

// DefaultDeployTimeout bounds how long deploy waits for the Service.
const DefaultDeployTimeout = 5 * time.Minute

// deployPoll is how often deploy looks at the Service while it waits.
const deployPoll = 300 * time.Millisecond

// latestTarget names the latest ready Revision in --traffic and --tag.
const latestTarget = "@latest"

func deployCommand(s *session) *cobra.Command {
	var o deployOptions
	cmd := &cobra.Command{
		Use:   "deploy NAME (--image IMAGE | --source DIR --builder IMAGE)",
		Short: "Create or update a Knative Service from an image or a source directory, wait until it is Ready and print its URL",
		Long: `deploy creates the Service NAME, or updates its template, so that it runs IMAGE,
then shows the progress (the Revision created, its conditions: image pull,
readiness) and prints the Service's URL once it is Ready.

IMAGE may be one pushed to knbox's own registry (see README "Pushing images
to knbox"), e.g. registry.knbox.local/default/hello:v1.

--source DIR --builder IMAGE builds DIR first: it packs DIR (without .git and
what DIR/.knboxignore, else DIR/.gitignore, names), creates a Build
(build.knative.dev) whose one step runs IMAGE in /workspace holding DIR, with
KNBOX_IMAGE naming where in knbox's registry to push, uploads DIR, follows the
build, then runs the pushed image by digest (README "Builds": the builder
contract). The build runs as the ServiceAccount knbox-deployer, which deploy
creates and lets push to the namespace's repositories if it may.

--traffic REVISION=PERCENT (repeatable; @latest is the latest ready Revision)
replaces the Service's traffic; --tag REVISION=TAG (repeatable) tags a
Revision, adding a target with no traffic if it has none. --env KEY=VALUE sets
a variable of the container, --env KEY- removes it.`,
		Example: `  knbox deploy hello --image registry.knbox.local/default/hello:v1
  knbox deploy hello --image registry.knbox.local/default/hello:v2 --tag @latest=candidate --traffic hello-00001=90 --traffic @latest=10
  knbox deploy hello --env TARGET=knbox -n team-a
  knbox deploy hello --source . --builder 127.0.0.1:5000/builders/go:v1`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.image, "image", "", "the container image to run")
	f.StringVar(&o.source, "source", "", "a directory to build an image from (see --builder)")
	f.StringVar(&o.builder, "builder", "", "the builder image for --source (required with it: it builds /workspace and pushes to $KNBOX_IMAGE)")
	f.StringArrayVar(&o.env, "env", nil, "KEY=VALUE sets an environment variable, KEY- removes it (repeatable)")
	f.StringArrayVar(&o.traffic, "traffic", nil, "REVISION=PERCENT; @latest is the latest ready Revision (repeatable; replaces the traffic)")
	f.StringArrayVar(&o.tags, "tag", nil, "REVISION=TAG; @latest is the latest ready Revision (repeatable)")
	f.DurationVar(&o.timeout, "timeout", DefaultDeployTimeout, "how long to wait for the Service to be Ready (and, with --source, the build's timeout)")
	f.BoolVar(&o.noWait, "no-wait", false, "do not wait: print what was sent and return")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		return s.deploy(ctx, streams.Out, args[0], o)
	})
	return cmd
}

// deploy is `knbox deploy`.
func (s *session) deploy(ctx context.Context, out io.Writer, name string, o deployOptions) error {
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return fmt.Errorf("NAME %q is not a Service name: %s", name, strings.Join(errs, "; "))
	}
	if o.source != "" || o.builder != "" {
		if o.image != "" {
			return errors.New("--image and --source: give one")
		}
		return deploySource(ctx, s, out, name, o)
	}
	env, unset, err := parseEnv(o.env)
	if err != nil {
		return err
	}
	traffic, err := parseTraffic(o.traffic)
	if err != nil {
		return err
	}
	tags, err := parseTags(o.tags)
	if err != nil {
		return err
	}
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return err
	}
	ns, _, err := s.conn.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	sc, err := servingclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	svcs := sc.ServingV1().Services(ns)
	svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
	creating := apierrors.IsNotFound(err)
	switch {
	case creating:
		if o.image == "" {
			return fmt.Errorf("service %s/%s does not exist: --image is needed to create it", ns, name)
		}
		svc = &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	case err != nil:
		return err
	}
	changeService(svc, o.image, env, unset, traffic, tags)
	if creating {
		fmt.Fprintf(out, "Creating Service %s/%s\n", ns, name)
		svc, err = svcs.Create(ctx, svc, metav1.CreateOptions{FieldManager: "knbox-deploy"})
	} else {
		fmt.Fprintf(out, "Updating Service %s/%s\n", ns, name)
		svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{FieldManager: "knbox-deploy"})
	}
	if err != nil {
		return err
	}
	if o.noWait {
		return nil
	}
	kube, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	return waitDeployed(ctx, out, sc, kube, svc, o.timeout)
}

// changeService applies deploy's flags to the Service's spec.
func changeService(svc *servingv1.Service, image string, env map[string]string, unset []string, traffic []servingv1.TrafficTarget, tags map[string]string) {
	ps := &svc.Spec.Template.Spec.PodSpec
	if len(ps.Containers) == 0 {
		ps.Containers = []corev1.Container{{}}
	}
	c := &ps.Containers[0]
	if image != "" {
		c.Image = image
	}
	// A new Revision each time the template changes: Knative names it.
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == k })
		if i >= 0 {
			c.Env[i] = corev1.EnvVar{Name: k, Value: env[k]}
		} else {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
		}
	}
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(unset, e.Name) })
	if traffic != nil {
		svc.Spec.Traffic = traffic
	}
	if len(tags) == 0 {
		return
	}
	if svc.Spec.Traffic == nil {
		svc.Spec.Traffic = []servingv1.TrafficTarget{{LatestRevision: ptr.To(true), Percent: ptr.To[int64](100)}}
	}
	for _, rev := range sortedKeys(tags) {
		tag := tags[rev]
		// A tag names one target: taken from where it was.
		for i := range svc.Spec.Traffic {
			if svc.Spec.Traffic[i].Tag == tag {
				svc.Spec.Traffic[i].Tag = ""
			}
		}
		i := slices.IndexFunc(svc.Spec.Traffic, func(t servingv1.TrafficTarget) bool { return targetIs(t, rev) && t.Tag == "" })
		if i < 0 {
			svc.Spec.Traffic = append(svc.Spec.Traffic, target(rev, 0))
			i = len(svc.Spec.Traffic) - 1
		}
		svc.Spec.Traffic[i].Tag = tag
	}
	// Targets left with neither tag nor traffic go.
	svc.Spec.Traffic = slices.DeleteFunc(svc.Spec.Traffic, func(t servingv1.TrafficTarget) bool {
		return t.Tag == "" && (t.Percent == nil || *t.Percent == 0)
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func targetIs(t servingv1.TrafficTarget, rev string) bool {
	if rev == latestTarget {
		return t.LatestRevision != nil && *t.LatestRevision
	}
	return t.RevisionName == rev && (t.LatestRevision == nil || !*t.LatestRevision)
}

func target(rev string, percent int64) servingv1.TrafficTarget {
	if rev == latestTarget {
		return servingv1.TrafficTarget{LatestRevision: ptr.To(true), Percent: ptr.To(percent)}
	}
	return servingv1.TrafficTarget{RevisionName: rev, LatestRevision: ptr.To(false), Percent: ptr.To(percent)}
}

// parseEnv reads --env: KEY=VALUE sets, KEY- removes.
func parseEnv(flags []string) (map[string]string, []string, error) {
	set := map[string]string{}
	var unset []string
	for _, e := range flags {
		if k, ok := strings.CutSuffix(e, "-"); ok && !strings.Contains(e, "=") {
			if errs := validation.IsEnvVarName(k); len(errs) > 0 {
				return nil, nil, fmt.Errorf("--env %q: %s", e, strings.Join(errs, "; "))
			}
			unset = append(unset, k)
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE or KEY-", e)
		}
		if errs := validation.IsEnvVarName(k); len(errs) > 0 {
			return nil, nil, fmt.Errorf("--env %q: %s", e, strings.Join(errs, "; "))
		}
		set[k] = v
	}
	return set, unset, nil
}

// revisionRef checks the REVISION of --traffic and --tag.
func revisionRef(flag, s, rev string) error {
	if rev == latestTarget {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(rev); len(errs) > 0 {
		return fmt.Errorf("%s %q: %q is neither @latest nor a Revision name: %s", flag, s, rev, strings.Join(errs, "; "))
	}
	return nil
}

// parseTraffic reads --traffic REVISION=PERCENT; the percents must add up
// to 100.
func parseTraffic(flags []string) ([]servingv1.TrafficTarget, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	var out []servingv1.TrafficTarget
	var sum int64
	seen := map[string]bool{}
	for _, s := range flags {
		rev, p, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--traffic %q: want REVISION=PERCENT (REVISION may be @latest)", s)
		}
		if err := revisionRef("--traffic", s, rev); err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(p, "%"), 10, 64)
		if err != nil || n < 0 || n > 100 {
			return nil, fmt.Errorf("--traffic %q: the percent must be a whole number from 0 to 100", s)
		}
		if seen[rev] {
			return nil, fmt.Errorf("--traffic %q: %s is given twice", s, rev)
		}
		seen[rev] = true
		sum += n
		out = append(out, target(rev, n))
	}
	if sum != 100 {
		return nil, fmt.Errorf("--traffic: the percents add up to %d, not 100", sum)
	}
	return out, nil
}

// parseTags reads --tag REVISION=TAG.
func parseTags(flags []string) (map[string]string, error) {
	tags := map[string]string{}
	used := map[string]bool{}
	for _, s := range flags {
		rev, tag, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--tag %q: want REVISION=TAG (REVISION may be @latest)", s)
		}
		if err := revisionRef("--tag", s, rev); err != nil {
			return nil, err
		}
		if errs := validation.IsDNS1035Label(tag); len(errs) > 0 {
			return nil, fmt.Errorf("--tag %q: %q is not a tag: %s", s, tag, strings.Join(errs, "; "))
		}
		if used[tag] {
			return nil, fmt.Errorf("--tag %q: tag %s is given twice", s, tag)
		}
		if _, ok := tags[rev]; ok {
			return nil, fmt.Errorf("--tag %q: %s has a tag already in this command", s, rev)
		}
		used[tag] = true
		tags[rev] = tag
	}
	return tags, nil
}

// waitDeployed shows the Service's progress until it is Ready for its
// latest generation (and prints its URL), it fails, or timeout passes.
func waitDeployed(ctx context.Context, out io.Writer, sc servingclient.Interface, kube *kubeclient.Clientset, svc *servingv1.Service, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gen := svc.Generation
	seen := map[string]bool{} // lines printed
	say := func(line string) {
		if !seen[line] {
			seen[line] = true
			fmt.Fprintln(out, line)
		}
	}
	tick := time.NewTicker(deployPoll)
	defer tick.Stop()
	for {
		cur, err := sc.ServingV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil && cur.Status.ObservedGeneration >= gen {
			rev := cur.Status.LatestCreatedRevisionName
			if rev != "" {
				say(fmt.Sprintf("Revision %s created", rev))
				if r, err := sc.ServingV1().Revisions(svc.Namespace).Get(ctx, rev, metav1.GetOptions{}); err == nil {
					for _, cs := range r.Status.ContainerStatuses {
						if cs.ImageDigest != "" {
							say(fmt.Sprintf("Revision %s: image resolved to %s", rev, cs.ImageDigest))
						}
					}
					for _, c := range r.Status.Conditions {
						if c.Reason == "" && c.Message == "" {
							continue
						}
						say(fmt.Sprintf("Revision %s: %s %s: %s %s", rev, c.Type, c.Status, c.Reason, c.Message))
					}
				}
				// The instances, as Pods: pulling and starting.
				pods, err := kube.Pods(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=" + rev})
				if err == nil {
					for _, p := range pods.Items {
						for _, c := range p.Status.ContainerStatuses {
							switch {
							case c.State.Waiting != nil:
								say(strings.TrimSpace(fmt.Sprintf("Instance %s: %s %s", p.Name, c.State.Waiting.Reason, c.State.Waiting.Message)))
							case c.State.Running != nil && c.Ready:
								say(fmt.Sprintf("Instance %s: %s ready", p.Name, c.Name))
							case c.State.Running != nil:
								say(fmt.Sprintf("Instance %s: %s running", p.Name, c.Name))
							}
						}
					}
				}
			}
			ready := cur.Status.GetCondition(apis.ConditionReady)
			switch {
			case ready != nil && ready.IsTrue() && cur.Status.LatestReadyRevisionName == rev:
				url := ""
				if cur.Status.URL != nil {
					url = cur.Status.URL.String()
				}
				fmt.Fprintf(out, "Service %s/%s is Ready, revision %s serves at:\n%s\n", cur.Namespace, cur.Name, rev, url)
				return nil
			case ready != nil && ready.IsFalse():
				return fmt.Errorf("service %s/%s failed: %s: %s", cur.Namespace, cur.Name, ready.Reason, ready.Message)
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("service %s/%s is not Ready after %s (--timeout); see knbox describe ksvc %s -n %s", svc.Namespace, svc.Name, timeout, svc.Name, svc.Namespace)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}
