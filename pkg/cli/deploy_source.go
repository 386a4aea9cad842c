package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/kubeclient"
)

// The builder contract of `knbox deploy --source` (README "Builds"): the
// Build's one step runs the builder image in /workspace, which holds the
// source, with KNBOX_IMAGE naming where to push the image (a fresh tag of
// the repository NAMESPACE/NAME of knbox's registry, as the step reaches
// it) and DOCKER_CONFIG holding credentials for it; the builder pushes one
// image there, writes its digest (or its reference by digest) to
// /dev/termination-log, and exits 0. The Service then runs that image.
const (
	// BuilderImageEnv names the reference the builder pushes to.
	BuilderImageEnv = "KNBOX_IMAGE"
	// DeployerServiceAccount runs deploy's builds: it may push to the
	// namespace's repositories of knbox's registry (and nothing else that
	// deploy grants), so that the default ServiceAccount, which instances
	// run as, gets no push rights.
	DeployerServiceAccount = "knbox-deployer"
	// deployerBinding binds knbox-registry-edit to DeployerServiceAccount.
	deployerBinding = "knbox-deployer-registry"
	// registryEditRole is the ClusterRole that pushes to knbox's registry.
	registryEditRole = "knbox-registry-edit"
	// DeployLabel marks the Builds of `knbox deploy NAME --source`.
	DeployLabel = "knbox.dev/deploy"
	// buildStep names the Build's one step.
	buildStep = "build"
	// keepBuilds is how many Builds of a Service's deploys are kept, with
	// their logs (the newest, the current one among them).
	keepBuilds = 5
	// failureTail is how many of the build log's last lines a failure shows.
	failureTail = 20
	// serviceRegistryHost names knbox's registry in the Service's image when
	// the builder wrote a bare digest: the name Revisions may use for the
	// registry whatever its address (registry.names).
	serviceRegistryHost = "registry.knbox.local"
)

var buildGVR = buildGV.WithResource("builds")

// deploySource is `knbox deploy NAME --source DIR --builder IMAGE`: it packs
// DIR, builds it with the builder into knbox's registry, then deploys the
// image by digest as --image does.
func deploySource(ctx context.Context, s *session, out io.Writer, svc string, o deployOptions) error {
	if o.source == "" {
		return errors.New("--builder builds --source DIR: give --source too")
	}
	if o.builder == "" {
		return errors.New("--source needs --builder IMAGE: knbox has no builder image of its own (it would have to be fetched); " +
			"any image that follows the builder contract does (README \"Builds\": build /workspace, push to $KNBOX_IMAGE)")
	}
	if _, err := name.ParseReference(o.builder); err != nil {
		return fmt.Errorf("--builder %q: %v", o.builder, err)
	}
	if fi, err := os.Stat(o.source); err != nil {
		return fmt.Errorf("--source: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--source %s: not a directory", o.source)
	}
	// The other flags are checked before anything is built.
	if _, _, err := parseEnv(o.env); err != nil {
		return err
	}
	if _, err := parseTraffic(o.traffic); err != nil {
		return err
	}
	if _, err := parseTags(o.tags); err != nil {
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
	kube, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}

	// The archive, spooled to a file: its size is known before it is sent.
	spool, err := os.CreateTemp("", "knbox-source-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	st, err := packSource(o.source, spool)
	if err != nil {
		return err
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(o.source)
	fmt.Fprintf(out, "Packed %s: %d files, %s (%s compressed)", abs, st.files, humanBytes(st.bytes), humanBytes(size))
	if st.skipped > 0 {
		fmt.Fprintf(out, ", %d left out (.git, %s or .gitignore)", st.skipped, IgnoreFile)
	}
	fmt.Fprintln(out)

	if err := ensureDeployer(ctx, out, kube, ns); err != nil {
		return err
	}
	tag, err := buildTag()
	if err != nil {
		return err
	}
	b, err := createBuild(ctx, dyn, ns, svc, tag, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Build %s/%s created: %s builds %s/%s:%s\n", ns, b.Name, o.builder, ns, svc, tag)
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := uploadSource(ctx, rc, ns, b.Name, spool, size, out); err != nil {
		// A Build without its source would wait for ever.
		if derr := dyn.Resource(buildGVR).Namespace(ns).Delete(context.WithoutCancel(ctx), b.Name, metav1.DeleteOptions{}); derr == nil {
			fmt.Fprintf(out, "Build %s/%s deleted\n", ns, b.Name)
		}
		return err
	}
	digest, err := followBuild(ctx, out, dyn, rc, ns, b.Name, o.timeout)
	pruneBuilds(ctx, dyn, ns, svc, b.Name)
	if err != nil {
		return err
	}
	img := serviceImage(ns, svc, tag, digest)
	if strings.Contains(img, "@") {
		fmt.Fprintf(out, "Build %s pushed %s\n", b.Name, img)
	} else {
		fmt.Fprintf(out, "Build %s succeeded; the builder wrote no digest to /dev/termination-log: deploying the tag %s\n", b.Name, img)
	}
	o.image, o.source, o.builder = img, "", ""
	return s.deploy(ctx, out, svc, o)
}

// pruneBuilds deletes the ended Builds of earlier deploys of svc but the
// newest keepBuilds (their logs go with them), best effort: a Build that
// someone keeps has no deploy label, or is relabeled.
func pruneBuilds(ctx context.Context, dyn dynamic.Interface, ns, svc, current string) {
	builds := dyn.Resource(buildGVR).Namespace(ns)
	list, err := builds.List(ctx, metav1.ListOptions{LabelSelector: DeployLabel + "=" + svc})
	if err != nil {
		return
	}
	items := list.Items
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int {
		return b.GetCreationTimestamp().Compare(a.GetCreationTimestamp().Time)
	})
	kept := 0
	for _, u := range items {
		b := &buildv1alpha1.Build{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b) != nil {
			continue
		}
		if u.GetName() == current || !b.Status.IsDone() || kept < keepBuilds {
			kept++
			continue
		}
		_ = builds.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
	}
}

// buildTag is a tag no other deploy uses: the time and a random part.
func buildTag() (string, error) {
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return "build-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(r[:]), nil
}

// createBuild creates the Build: source uploaded, one step running the
// builder with KNBOX_IMAGE, as DeployerServiceAccount, stopped at
// --timeout.
func createBuild(ctx context.Context, dyn dynamic.Interface, ns, svc, tag string, o deployOptions) (*buildv1alpha1.Build, error) {
	// A Build name is a DNS subdomain; the Service's name is a label.
	bname := svc + "-" + tag
	b := &buildv1alpha1.Build{
		TypeMeta: metav1.TypeMeta{APIVersion: buildGV.String(), Kind: "Build"},
		ObjectMeta: metav1.ObjectMeta{Name: bname, Namespace: ns, Labels: map[string]string{DeployLabel: svc},
			Annotations: map[string]string{"knbox.dev/source": o.source}},
		Spec: buildv1alpha1.BuildSpec{
			Source:             &buildv1alpha1.SourceSpec{Upload: &buildv1alpha1.UploadSourceSpec{}},
			ServiceAccountName: DeployerServiceAccount,
			Timeout:            &metav1.Duration{Duration: o.timeout},
			Steps: []corev1.Container{{
				Name:       buildStep,
				Image:      o.builder,
				WorkingDir: "/workspace",
				// KNBOX_REGISTRY is set by knbox before the step's own
				// variables (package build).
				Env: []corev1.EnvVar{{Name: BuilderImageEnv, Value: "$(KNBOX_REGISTRY)/" + ns + "/" + svc + ":" + tag}},
			}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	u, err := dyn.Resource(buildGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: "knbox-deploy"})
	if err != nil {
		return nil, fmt.Errorf("create Build %s/%s: %w", ns, bname, err)
	}
	created := &buildv1alpha1.Build{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, created); err != nil {
		return nil, err
	}
	return created, nil
}

// ensureDeployer makes sure DeployerServiceAccount exists and may push to
// the namespace's repositories: it creates the ServiceAccount and the
// RoleBinding deployerBinding to registryEditRole when they are missing.
// Creating the RoleBinding needs what it binds (RBAC's escalation check,
// applied by the server) and the right to create RoleBindings (admin, not
// edit): a caller who may not is told, and the build goes on, since an
// admin may have granted the push otherwise; if the push is then refused,
// the build's failure says what to ask for (pushHint).
func ensureDeployer(ctx context.Context, out io.Writer, kube *kubeclient.Clientset, ns string) error {
	sas := kube.ServiceAccounts(ns)
	if _, err := sas.Get(ctx, DeployerServiceAccount, metav1.GetOptions{}); apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DeployerServiceAccount,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "knbox-deploy"}}}, metav1.CreateOptions{FieldManager: "knbox-deploy"})
		switch {
		case err == nil:
			fmt.Fprintf(out, "ServiceAccount %s/%s created: it runs deploy's builds\n", ns, DeployerServiceAccount)
		case apierrors.IsAlreadyExists(err):
		default:
			return fmt.Errorf("deploy --source builds as the ServiceAccount %s/%s, which does not exist and which you may not create (%v); ask an admin: kubectl create serviceaccount %s -n %s",
				ns, DeployerServiceAccount, Human(err), DeployerServiceAccount, ns)
		}
	} else if err != nil {
		return err
	}
	rbs := kube.RoleBindings(ns)
	if rb, err := rbs.Get(ctx, deployerBinding, metav1.GetOptions{}); err == nil {
		if rb.RoleRef.Kind == "ClusterRole" && rb.RoleRef.Name == registryEditRole {
			return nil
		}
		return fmt.Errorf("RoleBinding %s/%s binds %s %s, not the ClusterRole %s: deploy --source needs it to let the ServiceAccount %s push; delete it or fix it",
			ns, deployerBinding, rb.RoleRef.Kind, rb.RoleRef.Name, registryEditRole, DeployerServiceAccount)
	} else if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return err
	}
	_, err := rbs.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: deployerBinding, Labels: map[string]string{"app.kubernetes.io/managed-by": "knbox-deploy"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: registryEditRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: DeployerServiceAccount, Namespace: ns}},
	}, metav1.CreateOptions{FieldManager: "knbox-deploy"})
	switch {
	case err == nil:
		fmt.Fprintf(out, "RoleBinding %s/%s created: ServiceAccount %s may push to the namespace's repositories (ClusterRole %s)\n",
			ns, deployerBinding, DeployerServiceAccount, registryEditRole)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err):
		fmt.Fprintf(out, "Warning: you may not let the ServiceAccount %s/%s push to knbox's registry (%v); the build goes on in case an admin did. %s\n",
			ns, DeployerServiceAccount, Human(err), pushHint(ns))
		return nil
	}
	return err
}

// pushHint is what to ask an admin for when the deployer may not push.
func pushHint(ns string) string {
	return fmt.Sprintf("If its push is refused, ask an admin (or anyone holding push rights who may create RoleBindings): "+
		"kubectl create rolebinding %s --clusterrole=%s --serviceaccount=%s:%s -n %s",
		deployerBinding, registryEditRole, ns, DeployerServiceAccount, ns)
}

// pushRefused tells whether a build's failure message reads as a push the
// registry refused.
func pushRefused(msg string) bool {
	m := strings.ToUpper(msg)
	return strings.Contains(m, "DENIED") || strings.Contains(m, "UNAUTHORIZED") || strings.Contains(m, "403")
}

// uploadSource PUTs the archive to builds/NAME/source, showing the bytes
// sent.
func uploadSource(ctx context.Context, rc *rest.Config, ns, build string, body io.Reader, size int64, out io.Writer) error {
	rc = rest.CopyConfig(rc)
	rc.Timeout = 0 // the context bounds it
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return err
	}
	u := strings.TrimSuffix(rc.Host, "/") + "/apis/" + buildGV.String() + "/namespaces/" + ns + "/builds/" + build + "/source"
	p := &progress{r: body, size: size, out: out, what: "Uploading the source"}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, p)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("upload the source to Build %s/%s: %w", ns, build, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		fmt.Fprintf(out, "Uploaded the source: %s\n", humanBytes(size))
		return nil
	}
	var status metav1.Status
	if json.Unmarshal(msg, &status) == nil && status.Message != "" {
		msg = []byte(status.Message)
	}
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		return fmt.Errorf("the source archive (%s) is too large for the server: %s; leave files out with a %s file (as .gitignore) or ask the operator to raise builds.maxUploadBytes",
			humanBytes(size), bytes.TrimSpace(msg), IgnoreFile)
	}
	return fmt.Errorf("upload the source to Build %s/%s: %s: %s", ns, build, resp.Status, bytes.TrimSpace(msg))
}

// progress counts what is read through it and says so at every quarter.
type progress struct {
	r         io.Reader
	size, n   int64
	out       io.Writer
	what      string
	lastShown int64
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.size > 0 && (p.n-p.lastShown)*4 >= p.size && p.n < p.size {
		p.lastShown = p.n
		fmt.Fprintf(p.out, "%s: %s of %s\n", p.what, humanBytes(p.n), humanBytes(p.size))
	}
	return n, err
}

// followBuild shows the Build's progress until it ends; it returns the
// digest the builder wrote (or "") when it succeeded, its failing step's
// message and the log's last lines when it failed.
func followBuild(ctx context.Context, out io.Writer, dyn dynamic.Interface, rc *rest.Config, ns, name string, timeout time.Duration) (string, error) {
	// The server stops the build at its timeout; the slack covers the
	// pull of the builder and the status's way back.
	wctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	last := ""
	tick := time.NewTicker(deployPoll)
	defer tick.Stop()
	for {
		u, err := dyn.Resource(buildGVR).Namespace(ns).Get(wctx, name, metav1.GetOptions{})
		if err != nil && wctx.Err() == nil {
			return "", err
		}
		if err == nil {
			b := &buildv1alpha1.Build{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
				return "", err
			}
			if c := b.Status.Succeeded(); c != nil {
				line := fmt.Sprintf("Build %s: %s", name, strings.TrimSpace(c.Reason+" "+c.Message))
				if c.IsTrue() {
					line = fmt.Sprintf("Build %s succeeded (steps: %s)", name, strings.Join(b.Status.StepsCompleted, ", "))
				}
				// The upload is done: a status still waiting for it is stale.
				if line != last && c.Reason != buildv1alpha1.ReasonWaitingForSource {
					fmt.Fprintln(out, line)
					last = line
				}
				switch {
				case c.IsTrue():
					return builtDigest(b), nil
				case c.IsFalse():
					fmt.Fprintf(out, "The build log's last lines (knbox logs --build %s -n %s):\n", name, ns)
					if err := logTail(ctx, out, rc, ns, name); err != nil {
						fmt.Fprintf(out, "  (no log: %v)\n", err)
					}
					err := fmt.Errorf("build %s/%s failed: %s: %s", ns, name, c.Reason, c.Message)
					if strings.Contains(c.Message, "$(KNBOX_REGISTRY)") {
						err = fmt.Errorf("%w\nThe build's step was not told where knbox's registry is: deploy --source needs knbox's embedded registry enabled on a loopback address (registry.addr)", err)
					}
					if pushRefused(c.Message) {
						err = fmt.Errorf("%w\nThe registry refused the push of the ServiceAccount %s. %s", err, DeployerServiceAccount, pushHint(ns))
					}
					return "", err
				}
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", fmt.Errorf("build %s/%s has not ended after %s; see knbox logs --build %s -n %s", ns, name, timeout+time.Minute, name, ns)
		case <-tick.C:
		}
	}
}

// logTail prints the last failureTail lines of the Build's log.
func logTail(ctx context.Context, out io.Writer, rc *rest.Config, ns, name string) error {
	var buf bytes.Buffer
	req, err := buildLogRequest(rc, ns, name, logsOptions{})
	if err != nil {
		return err
	}
	if err := stream(ctx, &limitedWriter{w: &buf, max: 1 << 20}, req, "build "+name); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) > failureTail {
		lines = lines[len(lines)-failureTail:]
	}
	for _, l := range lines {
		fmt.Fprintln(out, "  "+l)
	}
	return nil
}

// limitedWriter keeps the last max bytes written to it at most (it drops
// the start of what is too long).
type limitedWriter struct {
	w   *bytes.Buffer
	max int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.w.Write(p)
	if over := l.w.Len() - l.max; over > 0 {
		l.w.Next(over)
	}
	return len(p), nil
}

var digestRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// builtDigest is the digest the builder wrote to its termination log, as a
// bare digest or in a reference ("" if none).
func builtDigest(b *buildv1alpha1.Build) string {
	for i := len(b.Status.StepStates) - 1; i >= 0; i-- {
		if t := b.Status.StepStates[i].Terminated; t != nil {
			return digestRE.FindString(t.Message)
		}
	}
	return ""
}

// serviceImage is the image the Service runs: the pushed image by digest,
// else by its tag, as the registry's host-independent name.
func serviceImage(ns, svc, tag, digest string) string {
	repo := serviceRegistryHost + "/" + ns + "/" + svc
	if digest != "" {
		return repo + "@" + digest
	}
	return repo + ":" + tag
}
