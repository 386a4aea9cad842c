package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/image"
)

// maxImageArchive bounds an uploaded image archive.
const maxImageArchive = 16 << 30

// imagesHandler serves /knbox/v1/images: GET lists the cached images,
// POST .../load imports a `docker save` or OCI archive (the body), POST
// .../prune removes images no Revision runs.
func imagesHandler(images func() *image.Store, serving func() servingclient.Interface) http.Handler {
	reply := func(w http.ResponseWriter, code int, v interface{}) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, code int, err error) {
		reply(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: int32(code), Message: err.Error()})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, sc := images(), serving()
		if st == nil || sc == nil {
			fail(w, http.StatusServiceUnavailable, fmt.Errorf("the image store is starting"))
			return
		}
		switch {
		case r.Method == http.MethodGet && (r.URL.Path == "/knbox/v1/images" || r.URL.Path == "/knbox/v1/images/"):
			infos, err := st.List()
			if err != nil {
				fail(w, http.StatusInternalServerError, err)
				return
			}
			reply(w, http.StatusOK, infos)
		case r.Method == http.MethodPost && r.URL.Path == "/knbox/v1/images/load":
			refs, err := st.Load(r.Context(), http.MaxBytesReader(w, r.Body, maxImageArchive))
			if err != nil {
				fail(w, http.StatusBadRequest, fmt.Errorf("load image archive: %w", err))
				return
			}
			reply(w, http.StatusOK, map[string][]string{"loaded": refs})
		case r.Method == http.MethodPost && r.URL.Path == "/knbox/v1/images/prune":
			keep, err := runningDigests(r.Context(), sc)
			if err != nil {
				fail(w, http.StatusInternalServerError, err)
				return
			}
			freed, err := st.Prune(keep)
			if err != nil {
				fail(w, http.StatusInternalServerError, err)
				return
			}
			reply(w, http.StatusOK, map[string]int64{"freedBytes": freed})
		default:
			fail(w, http.StatusNotFound, fmt.Errorf("no such image operation: %s %s", r.Method, r.URL.Path))
		}
	})
}

// runningDigests are the images every existing Revision runs: prune keeps
// them.
func runningDigests(ctx context.Context, serving servingclient.Interface) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	revs, err := serving.ServingV1().Revisions("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list revisions: %w", err)
	}
	var keep []string
	for _, r := range revs.Items {
		for _, cs := range r.Status.ContainerStatuses {
			if cs.ImageDigest != "" {
				keep = append(keep, cs.ImageDigest)
			}
		}
	}
	return keep, nil
}
