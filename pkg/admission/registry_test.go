package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestRegistryImages: RegistryImage is asked about new images only, and
// its reason lands on the image's field path.
func TestRegistryImages(t *testing.T) {
	var asked []string
	a := &Admitter{RegistryImage: func(_ context.Context, u User, ns, img string) (string, error) {
		asked = append(asked, ns+" "+img)
		if strings.Contains(img, "/other/") {
			return "not yours", nil
		}
		return "", nil
	}}
	svc := func(images ...string) *servingv1.Service {
		s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "team-a"}}
		for _, img := range images {
			s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Image: img})
		}
		return s
	}
	fe, err := a.checkRegistryImages(context.Background(), Request{Op: Create, Object: svc("r/team-a/app", "r/other/app"), User: User{Name: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if fe == nil || !strings.Contains(fe.Error(), "spec.template.spec.containers[1].image") || !strings.Contains(fe.Error(), "not yours") {
		t.Errorf("refusal: %v", fe)
	}
	asked = nil
	fe, err = a.checkRegistryImages(context.Background(), Request{Op: Update, Object: svc("r/other/app"), Old: svc("r/other/app"), User: User{Name: "alice"}})
	if err != nil || fe != nil || len(asked) != 0 {
		t.Errorf("an unchanged image was checked: %v %v %v", fe, err, asked)
	}
}
