package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// markReady writes the status the controllers would: the latest Revision
// created and ready, the URL, Ready True.
func markReady(t *testing.T, env *apiservertest.Env, name, rev string) {
	t.Helper()
	ri := dyn(t, env).Resource(ksvcGVR).Namespace("default")
	o, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]interface{}{
		"observedGeneration":        o.GetGeneration(),
		"latestCreatedRevisionName": rev,
		"latestReadyRevisionName":   rev,
		"url":                       "http://" + name + ".default.localhost:8080",
		"conditions": []interface{}{map[string]interface{}{"type": "Ready", "status": "True",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}
	if err := unstructured.SetNestedField(o.Object, status, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.UpdateStatus(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDeploy: deploy creates a Service, waits until it is Ready for its
// generation and prints the URL; a second deploy updates the template
// (image, env) and traffic and tags; bad flags are refused naming the flag.
func TestDeploy(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	out, done, _ := background(t, env, "deploy", "web", "--image", "registry.knbox.local/default/web:v1", "--env", "A=1", "--timeout", "60s")
	eventually(t, func() bool {
		_, err := dyn(t, env).Resource(ksvcGVR).Namespace("default").Get(context.Background(), "web", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, "the Service to be created")
	markReady(t, env, "web", "web-00001")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("deploy: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("deploy did not return once the Service was Ready")
	}
	for _, want := range []string{"Revision web-00001 created", "http://web.default.localhost:8080"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	svc := getObject(t, env, ksvcGVR, "default", "web")
	if img, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "containers"); len(img) != 1 {
		t.Fatalf("containers: %v", img)
	}

	// An update: a new image, an env var removed and one set, traffic and tags.
	knbox(t, env, "", "deploy", "web", "--image", "registry.knbox.local/default/web:v2", "--env", "A-", "--env", "B=2",
		"--traffic", "web-00001=90", "--traffic", "@latest=10", "--tag", "@latest=candidate", "--tag", "web-00001=stable", "--no-wait")
	var got servingv1.Service
	o := getObject(t, env, ksvcGVR, "default", "web")
	if err := runtimeConvert(o, &got); err != nil {
		t.Fatal(err)
	}
	c := got.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.knbox.local/default/web:v2" || len(c.Env) != 1 || c.Env[0].Name != "B" || c.Env[0].Value != "2" {
		t.Errorf("container after update: %+v", c)
	}
	want := []servingv1.TrafficTarget{
		{RevisionName: "web-00001", LatestRevision: ptr.To(false), Percent: ptr.To[int64](90), Tag: "stable"},
		{LatestRevision: ptr.To(true), Percent: ptr.To[int64](10), Tag: "candidate"},
	}
	if len(got.Spec.Traffic) != 2 {
		t.Fatalf("traffic: %+v", got.Spec.Traffic)
	}
	for i, w := range want {
		g := got.Spec.Traffic[i]
		if g.RevisionName != w.RevisionName || *g.LatestRevision != *w.LatestRevision || *g.Percent != *w.Percent || g.Tag != w.Tag {
			t.Errorf("traffic[%d] = %+v, want %+v", i, g, w)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"deploy", "nope"}, "--image is needed"},
		{[]string{"deploy", "Bad_Name", "--image", "x"}, `NAME "Bad_Name" is not a Service name`},
		{[]string{"deploy", "web", "--traffic", "@latest=50"}, "add up to 50, not 100"},
		{[]string{"deploy", "web", "--traffic", "@latest"}, "want REVISION=PERCENT"},
		{[]string{"deploy", "web", "--tag", "@latest=Not_A_Tag"}, `"Not_A_Tag" is not a tag`},
		{[]string{"deploy", "web", "--env", "1X=2"}, `--env "1X=2"`},
		{[]string{"deploy", "web", "--source", "."}, "--source needs --builder IMAGE"},
		{[]string{"deploy", "web", "--builder", "b"}, "give --source too"},
		{[]string{"deploy", "web", "--source", ".", "--builder", "b", "--image", "x"}, "--image and --source: give one"},
		{[]string{"deploy", "web", "--source", "/nonexistent", "--builder", "b"}, "--source: stat /nonexistent"},
		{[]string{"deploy", "web", "--source", "deploy.go", "--builder", "b"}, "not a directory"},
		{[]string{"deploy", "web", "--source", ".", "--builder", "b", "--env", "1X=2"}, `--env "1X=2"`},
		{[]string{"deploy", "web", "--source", ".", "--builder", "Not A Ref"}, `--builder "Not A Ref"`},
		{[]string{"deploy", "web", "--image", "x", "--timeout", "0s"}, "not Ready after"},
	} {
		_, _, err := run(t, nil, "", append(c.args, "--kubeconfig", env.Kubeconfig)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("knbox %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

func runtimeConvert(o *unstructured.Unstructured, into interface{}) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into)
}
