package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"
)

// WorkspaceVolume is the emptyDir every step mounts at WorkspacePath.
const (
	WorkspaceVolume = "workspace"
	WorkspacePath   = "/workspace"
)

// Limits are the operator's bounds of builds (config builds.*).
type Limits struct {
	// DefaultTimeout is the timeout of a build that names none.
	DefaultTimeout time.Duration
	// MaxTimeout is the longest timeout a build may name.
	MaxTimeout time.Duration
}

// Defaults of Limits, as knative/build had them (10 minutes) and a day at
// most.
const (
	DefaultTimeout = 10 * time.Minute
	MaxTimeout     = 24 * time.Hour
)

type limitsKey struct{}

// WithLimits returns a context whose SetDefaults and Validate apply l.
func WithLimits(ctx context.Context, l Limits) context.Context {
	return context.WithValue(ctx, limitsKey{}, l)
}

func limitsFrom(ctx context.Context) Limits {
	l, _ := ctx.Value(limitsKey{}).(Limits)
	if l.DefaultTimeout <= 0 {
		l.DefaultTimeout = DefaultTimeout
	}
	if l.MaxTimeout <= 0 {
		l.MaxTimeout = MaxTimeout
	}
	return l
}

// GetGroupVersionKind is the kind, for error messages.
func (*Build) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("Build")
}

// SetDefaults sets the timeout to the operator's default.
func (b *Build) SetDefaults(ctx context.Context) {
	if b.Spec.Timeout == nil {
		b.Spec.Timeout = &metav1.Duration{Duration: limitsFrom(ctx).DefaultTimeout}
	}
}

// Validate checks a Build's spec; the status is the controller's. A spec
// does not change once the build started: an update may change metadata
// only.
func (b *Build) Validate(ctx context.Context) *apis.FieldError {
	if apis.IsInStatusUpdate(ctx) {
		return nil
	}
	if apis.IsInUpdate(ctx) {
		if old, ok := apis.GetBaseline(ctx).(*Build); ok && !equalSpec(&old.Spec, &b.Spec) {
			return &apis.FieldError{Message: "a Build's spec cannot change: create a new Build", Paths: []string{"spec"}}
		}
	}
	return b.Spec.Validate(ctx).ViaField("spec")
}

func equalSpec(a, b *BuildSpec) bool { return equality.Semantic.DeepEqual(a, b) }

// Validate checks a BuildSpec.
func (s *BuildSpec) Validate(ctx context.Context) *apis.FieldError {
	var errs *apis.FieldError
	if src := s.Source; src != nil {
		switch {
		case src.Git != nil && src.Upload != nil:
			errs = errs.Also(apis.ErrMultipleOneOf("source.git", "source.upload"))
		case src.Git != nil:
			errs = errs.Also(src.Git.Validate().ViaField("source.git"))
		case src.Upload == nil:
			errs = errs.Also(apis.ErrMissingOneOf("source.upload"))
		}
	}
	vols := map[string]bool{WorkspaceVolume: true}
	for i, v := range s.Volumes {
		p := fmt.Sprintf("volumes[%d]", i)
		switch {
		case v.Name == WorkspaceVolume:
			errs = errs.Also(apis.ErrInvalidValue(v.Name, p+".name", "the name workspace is the build's own volume"))
		case strings.HasPrefix(v.Name, "knbox-"):
			errs = errs.Also(apis.ErrInvalidValue(v.Name, p+".name", "names starting with knbox- are knbox's"))
		case len(validation.IsDNS1123Label(v.Name)) > 0:
			errs = errs.Also(apis.ErrInvalidValue(v.Name, p+".name", "must be a DNS label"))
		case vols[v.Name]:
			errs = errs.Also(apis.ErrGeneric("duplicate volume name", p+".name"))
		}
		vols[v.Name] = true
		n := 0
		if v.EmptyDir != nil {
			n++
		}
		if v.Secret != nil {
			n++
		}
		if v.ConfigMap != nil {
			n++
		}
		if n != 1 || v.VolumeSource.Projected != nil || v.HostPath != nil {
			errs = errs.Also(apis.ErrGeneric("a build volume is exactly one of emptyDir, secret and configMap", p))
		}
		if v.Secret != nil && v.Secret.SecretName == "" {
			errs = errs.Also(apis.ErrMissingField(p + ".secret.secretName"))
		}
		if v.ConfigMap != nil && v.ConfigMap.Name == "" {
			errs = errs.Also(apis.ErrMissingField(p + ".configMap.name"))
		}
	}
	if len(s.Steps) == 0 {
		errs = errs.Also(apis.ErrMissingField("steps"))
	}
	names := map[string]bool{}
	for i := range s.Steps {
		errs = errs.Also(validateStep(i, s, vols, names).ViaFieldIndex("steps", i))
	}
	if s.ServiceAccountName != "" && len(validation.IsDNS1123Subdomain(s.ServiceAccountName)) > 0 {
		errs = errs.Also(apis.ErrInvalidValue(s.ServiceAccountName, "serviceAccountName", "must be a DNS subdomain"))
	}
	if s.Timeout != nil {
		switch max := limitsFrom(ctx).MaxTimeout; {
		case s.Timeout.Duration <= 0:
			errs = errs.Also(apis.ErrInvalidValue(s.Timeout.Duration.String(), "timeout", "must be positive"))
		case s.Timeout.Duration > max:
			errs = errs.Also(apis.ErrInvalidValue(s.Timeout.Duration.String(), "timeout",
				fmt.Sprintf("must be at most %v (the operator's builds.maxTimeout)", max)))
		}
	}
	return errs
}

func validateStep(i int, s *BuildSpec, vols, names map[string]bool) *apis.FieldError {
	c := &s.Steps[i]
	var errs *apis.FieldError
	switch {
	case c.Name == "":
		errs = errs.Also(apis.ErrMissingField("name"))
	case len(validation.IsDNS1123Label(c.Name)) > 0:
		errs = errs.Also(apis.ErrInvalidValue(c.Name, "name", "must be a DNS label"))
	case names[c.Name]:
		errs = errs.Also(apis.ErrGeneric("duplicate step name", "name"))
	}
	names[c.Name] = true
	if c.Image == "" {
		errs = errs.Also(apis.ErrMissingField("image"))
	}
	for j, e := range c.Env {
		if e.ValueFrom != nil {
			errs = errs.Also(&apis.FieldError{Message: "must not set the field(s): a build step's environment holds plain values",
				Paths: []string{fmt.Sprintf("env[%d].valueFrom", j)}})
		}
		if len(validation.IsEnvVarName(e.Name)) > 0 {
			errs = errs.Also(apis.ErrInvalidValue(e.Name, fmt.Sprintf("env[%d].name", j), "not a valid environment variable name"))
		}
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{len(c.EnvFrom) > 0, "envFrom"}, {len(c.Ports) > 0, "ports"}, {c.ReadinessProbe != nil, "readinessProbe"},
		{c.LivenessProbe != nil, "livenessProbe"}, {c.StartupProbe != nil, "startupProbe"}, {c.Lifecycle != nil, "lifecycle"},
		{c.Stdin || c.StdinOnce || c.TTY, "stdin"}, {len(c.VolumeDevices) > 0, "volumeDevices"},
		{c.RestartPolicy != nil, "restartPolicy"}, {len(c.ResizePolicy) > 0, "resizePolicy"},
	} {
		if f.set {
			errs = errs.Also(apis.ErrDisallowedFields(f.name))
		}
	}
	if c.WorkingDir != "" && !path.IsAbs(c.WorkingDir) {
		errs = errs.Also(apis.ErrInvalidValue(c.WorkingDir, "workingDir", "must be an absolute path"))
	}
	for j, m := range c.VolumeMounts {
		p := fmt.Sprintf("volumeMounts[%d]", j)
		if !vols[m.Name] {
			errs = errs.Also(apis.ErrInvalidValue(m.Name, p+".name", "names no volume of the build"))
		}
		if !path.IsAbs(m.MountPath) {
			errs = errs.Also(apis.ErrInvalidValue(m.MountPath, p+".mountPath", "must be an absolute path"))
		}
		if path.Clean(m.MountPath) == WorkspacePath && m.Name != WorkspaceVolume {
			errs = errs.Also(apis.ErrInvalidValue(m.MountPath, p+".mountPath", "/workspace is the build's workspace"))
		}
	}
	return errs
}

// Bounds of a git source's fields.
const (
	maxGitURL      = 2048
	maxGitRevision = 255
)

// Validate checks a git source: an http or https URL without credentials,
// and a revision that is a branch, tag, commit or full ref name.
func (g *GitSourceSpec) Validate() *apis.FieldError {
	var errs *apis.FieldError
	if g.URL == "" {
		errs = errs.Also(apis.ErrMissingField("url"))
	} else if err := CheckGitURL(g.URL); err != nil {
		errs = errs.Also(apis.ErrInvalidValue(truncate(g.URL, 100), "url", err.Error()))
	}
	if err := CheckGitRevision(g.Revision); err != nil {
		errs = errs.Also(apis.ErrInvalidValue(truncate(g.Revision, 100), "revision", err.Error()))
	}
	return errs
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// CheckGitURL tells whether knbox clones u: an http or https URL with a
// host, no credentials (they would be stored in the spec for anyone who
// reads the Build), at most 2048 bytes. Other schemes (ssh, git, file) are
// refused: knbox's clone speaks http and https only.
func CheckGitURL(u string) error {
	if len(u) > maxGitURL {
		return fmt.Errorf("longer than %d bytes", maxGitURL)
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case p.Scheme != "http" && p.Scheme != "https":
		return errors.New("knbox clones http and https URLs only")
	case p.Host == "" || p.Hostname() == "":
		return errors.New("the URL has no host")
	case p.User != nil:
		return errors.New("credentials do not belong in the URL (the spec is readable by anyone who reads the Build)")
	case p.Opaque != "":
		return errors.New("not a hierarchical URL")
	}
	return nil
}

// CheckGitRevision tells whether r names a revision the way knbox fetches
// it: "" (the remote's HEAD), a branch or tag name, a commit (hex, 7 to 40
// digits) or a full ref name ("refs/..."), in git's ref name rules.
func CheckGitRevision(r string) error {
	if r == "" {
		return nil
	}
	if len(r) > maxGitRevision {
		return fmt.Errorf("longer than %d bytes", maxGitRevision)
	}
	if strings.HasPrefix(r, "-") || strings.HasPrefix(r, "/") || strings.HasSuffix(r, "/") ||
		strings.HasSuffix(r, ".") || strings.HasSuffix(r, ".lock") ||
		strings.Contains(r, "..") || strings.Contains(r, "//") || strings.Contains(r, "@{") || r == "@" {
		return errors.New("not a valid branch, tag or commit name")
	}
	for _, c := range r {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return fmt.Errorf("%q is not allowed in a branch, tag or commit name", c)
		}
	}
	for _, part := range strings.Split(r, "/") {
		if strings.HasPrefix(part, ".") {
			return errors.New("a component of the name starts with '.'")
		}
	}
	return nil
}

// IsCommitRevision tells whether r may name a commit: 7 to 40 hex digits.
// (A branch or tag may have such a name too; the clone tries them first.)
func IsCommitRevision(r string) bool {
	if len(r) < 7 || len(r) > 40 {
		return false
	}
	for _, c := range r {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
