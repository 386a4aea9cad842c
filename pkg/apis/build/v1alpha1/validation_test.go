package v1alpha1

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
)

func okBuild() *Build {
	return &Build{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}, Spec: BuildSpec{
		Steps: []corev1.Container{{Name: "one", Image: "busybox", Command: []string{"true"},
			VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}, {Name: "creds", MountPath: "/creds"}}}},
		Volumes: []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
	}}
}

func TestDefaultsAndLimits(t *testing.T) {
	ctx := WithLimits(context.Background(), Limits{DefaultTimeout: time.Minute, MaxTimeout: time.Hour})
	b := okBuild()
	b.SetDefaults(ctx)
	if b.Spec.Timeout == nil || b.Spec.Timeout.Duration != time.Minute {
		t.Fatalf("timeout %v, want the operator's default 1m", b.Spec.Timeout)
	}
	if err := b.Validate(ctx); err != nil {
		t.Fatalf("valid build refused: %v", err)
	}
	b.Spec.Timeout.Duration = 2 * time.Hour
	if err := b.Validate(ctx); err == nil || !strings.Contains(err.Error(), "spec.timeout") || !strings.Contains(err.Error(), "builds.maxTimeout") {
		t.Errorf("timeout over the max: %v", err)
	}
	// Without limits in the context: knbox's defaults.
	b = okBuild()
	b.SetDefaults(context.Background())
	if b.Spec.Timeout.Duration != DefaultTimeout {
		t.Errorf("default timeout %v", b.Spec.Timeout)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Build)
		paths  string // a path the error names
	}{
		{"no steps", func(b *Build) { b.Spec.Steps = nil }, "spec.steps"},
		{"no name", func(b *Build) { b.Spec.Steps[0].Name = "" }, "spec.steps[0].name"},
		{"bad name", func(b *Build) { b.Spec.Steps[0].Name = "A_b" }, "spec.steps[0].name"},
		{"duplicate", func(b *Build) { b.Spec.Steps = append(b.Spec.Steps, b.Spec.Steps[0]) }, "spec.steps[1].name"},
		{"no image", func(b *Build) { b.Spec.Steps[0].Image = "" }, "spec.steps[0].image"},
		{"ports", func(b *Build) { b.Spec.Steps[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}} }, "spec.steps[0].ports"},
		{"probe", func(b *Build) { b.Spec.Steps[0].ReadinessProbe = &corev1.Probe{} }, "spec.steps[0].readinessProbe"},
		{"valueFrom", func(b *Build) {
			b.Spec.Steps[0].Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{}}}
		}, "spec.steps[0].env[0].valueFrom"},
		{"envFrom", func(b *Build) { b.Spec.Steps[0].EnvFrom = []corev1.EnvFromSource{{}} }, "spec.steps[0].envFrom"},
		{"unknown mount", func(b *Build) { b.Spec.Steps[0].VolumeMounts[1].Name = "nope" }, "spec.steps[0].volumeMounts[1].name"},
		{"relative mount", func(b *Build) { b.Spec.Steps[0].VolumeMounts[1].MountPath = "creds" }, "spec.steps[0].volumeMounts[1].mountPath"},
		{"over workspace", func(b *Build) { b.Spec.Steps[0].VolumeMounts[1].MountPath = "/workspace/" }, "spec.steps[0].volumeMounts[1].mountPath"},
		{"volume named workspace", func(b *Build) { b.Spec.Volumes[0].Name = "workspace" }, "spec.volumes[0].name"},
		{"volume named knbox-", func(b *Build) { b.Spec.Volumes[0].Name = "knbox-registry-auth" }, "spec.volumes[0].name"},
		{"hostPath", func(b *Build) {
			b.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}, "spec.volumes[0]"},
		{"git without url", func(b *Build) { b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{}} }, "spec.source.git.url"},
		{"git ssh url", func(b *Build) { b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "ssh://git@example.com/a.git"}} }, "spec.source.git.url"},
		{"git file url", func(b *Build) { b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "file:///etc"}} }, "spec.source.git.url"},
		{"git url credentials", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://u:p@example.com/a.git"}}
		}, "spec.source.git.url"},
		{"git url no host", func(b *Build) { b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https:///a.git"}} }, "spec.source.git.url"},
		{"git url too long", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://example.com/" + strings.Repeat("a", 3000)}}
		}, "spec.source.git.url"},
		{"git revision option", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://example.com/a.git", Revision: "--upload-pack=x"}}
		}, "spec.source.git.revision"},
		{"git revision range", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://example.com/a.git", Revision: "main..dev"}}
		}, "spec.source.git.revision"},
		{"git revision space", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://example.com/a.git", Revision: "a b"}}
		}, "spec.source.git.revision"},
		{"empty source", func(b *Build) { b.Spec.Source = &SourceSpec{} }, "spec.source.upload"},
		{"two sources", func(b *Build) {
			b.Spec.Source = &SourceSpec{Git: &GitSourceSpec{URL: "https://x"}, Upload: &UploadSourceSpec{}}
		}, "spec.source.git"},
		{"timeout", func(b *Build) { b.Spec.Timeout = &metav1.Duration{Duration: -time.Second} }, "spec.timeout"},
		{"service account", func(b *Build) { b.Spec.ServiceAccountName = "Not/Valid" }, "spec.serviceAccountName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := okBuild()
			tt.mutate(b)
			err := b.Validate(apis.WithinCreate(context.Background()))
			if err == nil {
				t.Fatal("accepted")
			}
			found := false
			for _, e := range err.WrappedErrors() {
				for _, p := range e.Paths {
					found = found || p == tt.paths
				}
			}
			if !found {
				t.Errorf("error %q does not name %s", err, tt.paths)
			}
		})
	}
}

func TestSpecIsImmutable(t *testing.T) {
	old := okBuild()
	b := okBuild()
	b.Labels = map[string]string{"a": "b"}
	if err := b.Validate(apis.WithinUpdate(context.Background(), old)); err != nil {
		t.Errorf("a metadata change refused: %v", err)
	}
	b.Spec.Steps[0].Image = "other"
	if err := b.Validate(apis.WithinUpdate(context.Background(), old)); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("a spec change: %v", err)
	}
}

func TestGitSourceAccepted(t *testing.T) {
	for _, g := range []GitSourceSpec{
		{URL: "https://example.com/a.git"}, {URL: "http://127.0.0.1:8080/a.git", Revision: "main"},
		{URL: "https://example.com/a", Revision: "v1.2.3"}, {URL: "https://example.com/a", Revision: "feature/x-1"},
		{URL: "https://example.com/a", Revision: "refs/tags/v1"}, {URL: "https://example.com/a", Revision: "0123abc"},
		{URL: "https://example.com/a", Revision: strings.Repeat("ab", 20)},
	} {
		b := okBuild()
		b.Spec.Source = &SourceSpec{Git: &g}
		if err := b.Validate(apis.WithinCreate(context.Background())); err != nil {
			t.Errorf("%+v: %v", g, err)
		}
	}
}

// FuzzGitSource: any URL and revision are checked without a panic, and
// what is accepted keeps to the rules the clone relies on.
func FuzzGitSource(f *testing.F) {
	for _, s := range [][2]string{
		{"https://example.com/a.git", ""}, {"http://127.0.0.1:1/a", "main"}, {"file:///etc", "-x"},
		{"https://u:p@h/a", "a..b"}, {"https://h/a", "refs/heads/x"}, {"https://h/a", "0123abcdef"},
		{"http://[::1]:80/a", "x@{1}"}, {"https:h", ".hidden/x"}, {"https://h/%zz", "a\x00"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, u, rev string) {
		g := &GitSourceSpec{URL: u, Revision: rev}
		_ = g.Validate()
		if CheckGitURL(u) == nil && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(strings.ToLower(u), "http") {
			t.Errorf("accepted URL %q", u)
		}
		if CheckGitRevision(rev) == nil && (len(rev) > maxGitRevision || strings.Contains(rev, "..") || strings.HasPrefix(rev, "-")) {
			t.Errorf("accepted revision %q", rev)
		}
		_ = IsCommitRevision(rev)
	})
}

// FuzzBuild: any JSON body decodes, defaults and validates without a panic.
func FuzzBuild(f *testing.F) {
	seed, _ := json.Marshal(okBuild())
	f.Add(seed)
	f.Add([]byte(`{"spec":{"steps":[{"name":"a","image":"x","env":[{"name":"1","valueFrom":{}}]}],"timeout":"-1s"}}`))
	f.Add([]byte(`{"spec":{"volumes":[{"name":"workspace"},{"name":"v"}],"source":{"git":{"url":""}}}}`))
	f.Add([]byte(`{"spec":{"steps":[{"name":"a","image":"x"}],"source":{"git":{"url":"https://h/a.git","revision":"v1"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Build
		if json.Unmarshal(data, &b) != nil {
			return
		}
		ctx := apis.WithinCreate(context.Background())
		b.SetDefaults(ctx)
		_ = b.Validate(ctx)
		_ = b.Validate(apis.WithinUpdate(ctx, okBuild()))
	})
}
