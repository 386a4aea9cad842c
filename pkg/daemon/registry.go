package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/registry"
)

// registryNames are the names under which Revisions may name pushed
// images: the registry's address as reached from this host (with
// localhost for a loopback address) and the configured names
// (registry.knbox.local).
func registryNames(cfg *config.Config, addr net.Addr) []string {
	names := []string{clientAddr(addr)}
	if tcp, ok := addr.(*net.TCPAddr); ok && (tcp.IP.IsLoopback() || tcp.IP.IsUnspecified()) {
		names = append(names, net.JoinHostPort("localhost", strconv.Itoa(tcp.Port)))
	}
	for _, n := range cfg.Registry.Names {
		if n = strings.ToLower(n); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// serveRegistry serves the embedded registry on ln: plain HTTP on
// loopback (where docker, crane and ko use it without being told), HTTPS
// with the API's certificate on any other address, since the token travels
// with every request. Authentication and authorization are the API's.
func serveRegistry(cfg *config.Config, ln net.Listener, images *image.Store, api *apiserver.Server, cert tls.Certificate,
	errc chan<- error, log *slog.Logger) (*http.Server, error) {
	rc := cfg.Registry
	h, err := registry.New(registry.Options{
		Store:            images,
		Authenticate:     api.AuthenticateToken,
		Authorizer:       api,
		MaxBlobBytes:     int64(rc.MaxBlobBytes),
		MaxManifestBytes: int64(rc.MaxManifestBytes),
		MaxUploads:       rc.MaxUploads,
		UploadTTL:        rc.UploadTTL.D(),
		Logger:           log.With("component", "registry"),
	})
	if err != nil {
		return nil, err
	}
	// The API's connection limits and timeouts (no read timeout: a layer
	// upload may take long).
	srv := apiListen(cfg).Apply(&http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)})
	tcp, ok := ln.Addr().(*net.TCPAddr)
	ln = apiListen(cfg).Listener(ln)
	if ok && tcp.IP.IsLoopback() {
		go func() { errc <- srv.Serve(ln) }()
		log.Info("registry serving", "addr", "http://"+ln.Addr().String())
		return srv, nil
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	log.Info("registry serving", "addr", "https://"+ln.Addr().String())
	return srv, nil
}

// registryImageCheck is admission's RegistryImage: an image of the
// embedded registry (one of names) whose repository is in another
// namespace may be named only by a user who may pull it there, as the
// registry itself would decide. Images of other registries, and of the
// object's own namespace, pass.
func registryImageCheck(names []string, api func() *apiserver.Server) func(ctx context.Context, u admission.User, namespace, img string) (string, error) {
	return func(ctx context.Context, u admission.User, namespace, img string) (string, error) {
		ref, err := name.ParseReference(img)
		if err != nil || !slices.Contains(names, strings.ToLower(ref.Context().RegistryStr())) {
			return "", nil // Knative's validation speaks about a malformed image
		}
		repoNS, rest, _ := strings.Cut(ref.Context().RepositoryStr(), "/")
		if repoNS == namespace {
			return "", nil
		}
		srv := api()
		if srv == nil {
			return "", errors.New("the API server is starting")
		}
		attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups},
			Verb: "get", Namespace: repoNS, APIGroup: registry.APIGroup, APIVersion: "v1", Resource: registry.Resource, Name: rest, ResourceRequest: true}
		d, _, err := srv.Authorize(ctx, attrs)
		if err != nil {
			return "", err
		}
		if d != authorizer.DecisionAllow {
			return fmt.Sprintf("an image of knbox's registry in namespace %q: user %q may not pull it (get on repositories.%s %q in %q)", repoNS, u.Name, registry.APIGroup, rest, repoNS), nil
		}
		return "", nil
	}
}
