package image

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxArchiveBytes bounds an image archive uploaded to the handler.
const MaxArchiveBytes = 16 << 30

// Handler serves the image cache at /knbox/v1/images: GET lists the cached
// images, POST .../load imports a `docker save` or OCI archive (the body,
// at most MaxArchiveBytes), POST .../prune removes the images that inUse
// does not name (inUse is asked at each prune; an error from it answers
// 503 and removes nothing). Errors are metav1.Status bodies.
func Handler(s *Store, inUse func(ctx context.Context) ([]string, error)) http.Handler {
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
		switch {
		case r.Method == http.MethodGet && (r.URL.Path == "/knbox/v1/images" || r.URL.Path == "/knbox/v1/images/"):
			infos, err := s.List()
			if err != nil {
				fail(w, http.StatusInternalServerError, err)
				return
			}
			reply(w, http.StatusOK, infos)
		case r.Method == http.MethodPost && r.URL.Path == "/knbox/v1/images/load":
			refs, err := s.Load(r.Context(), http.MaxBytesReader(w, r.Body, MaxArchiveBytes))
			if err != nil {
				fail(w, http.StatusBadRequest, fmt.Errorf("load image archive: %w", err))
				return
			}
			reply(w, http.StatusOK, map[string][]string{"loaded": refs})
		case r.Method == http.MethodPost && r.URL.Path == "/knbox/v1/images/prune":
			keep, err := inUse(r.Context())
			if err != nil {
				fail(w, http.StatusServiceUnavailable, fmt.Errorf("cannot tell which images are in use: %w", err))
				return
			}
			freed, err := s.Prune(keep)
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
