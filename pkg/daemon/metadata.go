package daemon

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
)

// The metadata service (the runtime contract's MAY): every instance reaches,
// at http://127.0.0.2:8181 inside its own network namespace, its identity.
// Requests must carry "Metadata-Flavor: knbox" (or Cloud Run's "Google"),
// so that a request forged through the application (SSRF) does not get it.
//
//	GET /v1/instance          JSON: namespace, service, configuration,
//	                          revision, instance, hostname (the host's),
//	                          region and zone ("local")
//	GET /v1/instance/<field>  that field as text
//
// An instance whose containers declare port 8181 keeps it, without the
// service. Identity tokens are not served yet.
const instanceMetadataPort = 8181

// instanceMetadata is what the metadata service tells an instance.
type instanceMetadata struct {
	Namespace     string `json:"namespace"`
	Service       string `json:"service"`
	Configuration string `json:"configuration"`
	Revision      string `json:"revision"`
	Instance      string `json:"instance"`
	Hostname      string `json:"hostname"`
	Region        string `json:"region"`
	Zone          string `json:"zone"`
}

// metadataOf is spec's identity, from its labels and the serving
// container's K_* environment (which replicas sets as Knative does).
func metadataOf(spec *pod.Spec) instanceMetadata {
	m := instanceMetadata{Namespace: spec.Labels[replicas.LabelNamespace], Revision: spec.Labels[replicas.LabelRevision],
		Instance: spec.ID, Region: "local", Zone: "local"}
	m.Hostname, _ = os.Hostname()
	if spec.Serving >= 0 && spec.Serving < len(spec.Containers) {
		for _, e := range spec.Containers[spec.Serving].Env {
			switch e.Name {
			case "K_SERVICE":
				m.Service = e.Value
			case "K_CONFIGURATION":
				m.Configuration = e.Value
			}
		}
	}
	return m
}

// metadataHandler serves m.
func metadataHandler(m instanceMetadata) http.Handler {
	fields := map[string]string{"namespace": m.Namespace, "service": m.Service, "configuration": m.Configuration,
		"revision": m.Revision, "instance": m.Instance, "hostname": m.Hostname, "region": m.Region, "zone": m.Zone}
	body, _ := json.Marshal(m)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instance", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /v1/instance/{field}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := fields[r.PathValue("field")]
		if !ok {
			http.Error(w, "no such field: see GET /v1/instance", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(v))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "knbox")
		if f := r.Header.Get("Metadata-Flavor"); f != "knbox" && f != "Google" {
			http.Error(w, `missing header "Metadata-Flavor: knbox"`, http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveMetadata serves spec's metadata on ln until the returned server is
// closed.
func serveMetadata(ln net.Listener, spec *pod.Spec) *http.Server {
	s := &http.Server{Handler: metadataHandler(metadataOf(spec)), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() { _ = s.Serve(ln) }()
	return s
}
