package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// eventsAbout lists "Type Reason: message" of the events about kind/name.
func eventsAbout(t *testing.T, kube kubernetes.Interface, kind, name string) []string {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	l, err := kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", ev.Type, ev.Reason, ev.Message))
	}
	return out
}

func hasEvents(got []string, want ...string) error {
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			return fmt.Errorf("no event %q in %q", w, got)
		}
	}
	return nil
}

// TestEventsOfAService: the reconcilers record Knative's events, and a
// failing Revision says why.
func TestEventsOfAService(t *testing.T) {
	e := newEnv(t, nil)
	kube := kubernetes.NewForConfigOrDie(e.api.Config)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("hello", "example.com/hello:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("hello", "hello-00001")
	eventually(t, "the events of hello", func() error {
		if err := hasEvents(eventsAbout(t, kube, "Service", "hello"),
			`Normal Created: Created Configuration "hello"`, `Normal Created: Created Route "hello"`); err != nil {
			return err
		}
		if err := hasEvents(eventsAbout(t, kube, "Configuration", "hello"), `Normal Created: Created Revision "hello-00001"`,
			"Normal ConfigurationReady: Configuration becomes ready", `Normal LatestReadyUpdate: LatestReadyRevisionName updated to "hello-00001"`); err != nil {
			return err
		}
		return hasEvents(eventsAbout(t, kube, "Revision", "hello-00001"), "Normal RevisionReady: Revision becomes ready upon all resources being ready")
	})

	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("broken", "example.com/crash:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the events of broken", func() error {
		if err := hasEvents(eventsAbout(t, kube, "Revision", "broken-00001"), "Warning ExitCode1: Revision did not become ready: Container failed with: boom"); err != nil {
			return err
		}
		return hasEvents(eventsAbout(t, kube, "Configuration", "broken"), `Warning LatestCreatedFailed: Latest created revision "broken-00001" has failed`)
	})
}
