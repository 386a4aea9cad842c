package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"

	"github.com/knbox/knbox/pkg/version"
)

// DefaultDataDir is where `knbox serve` keeps its state (and the kubeconfig
// the client commands read) unless told otherwise.
const DefaultDataDir = "/var/lib/knbox"

// Options are the connection settings the client commands share. Zero
// values take the documented defaults.
type Options struct {
	// DataDir is the server's data directory: "" means $KNBOX_DATA_DIR,
	// else DefaultDataDir.
	DataDir string
	// Kubeconfig is the kubeconfig to use: "" means $KUBECONFIG (a list
	// of paths, merged as kubectl does), else <DataDir>/kubeconfig.
	Kubeconfig string
	// Namespace is the default namespace: "" means the current context's
	// namespace, else "default".
	Namespace string
}

// DataDirPath returns the data directory the options mean.
func (o Options) DataDirPath() string {
	if o.DataDir != "" {
		return o.DataDir
	}
	if d := os.Getenv("KNBOX_DATA_DIR"); d != "" {
		return d
	}
	return DefaultDataDir
}

// ReadKubeconfig returns the kubeconfig `knbox serve` wrote into dataDir.
func ReadKubeconfig(dataDir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "kubeconfig"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, noKubeconfig(dataDir)
	}
	return b, err
}

func noKubeconfig(dataDir string) error {
	return fmt.Errorf("no kubeconfig in %s: start the server first with `knbox serve --data-dir %s`", dataDir, dataDir)
}

// Load reads the kubeconfig the options name and returns the client
// configuration of its current context and the namespace to use.
func (o Options) Load() (*rest.Config, string, error) {
	var paths []string
	switch {
	case o.Kubeconfig != "":
		paths = []string{o.Kubeconfig}
	case os.Getenv("KUBECONFIG") != "":
		for _, p := range filepath.SplitList(os.Getenv("KUBECONFIG")) {
			if p != "" {
				paths = append(paths, p)
			}
		}
	}
	fromDataDir := len(paths) == 0
	if fromDataDir {
		paths = []string{filepath.Join(o.DataDirPath(), "kubeconfig")}
	}
	merged := clientcmdapi.NewConfig()
	found := 0
	for _, p := range paths {
		cfg, err := loadKubeconfigFile(p)
		if errors.Is(err, os.ErrNotExist) && len(paths) > 1 {
			continue // kubectl skips missing files of a $KUBECONFIG list
		}
		if errors.Is(err, os.ErrNotExist) {
			if fromDataDir {
				return nil, "", noKubeconfig(o.DataDirPath())
			}
			return nil, "", fmt.Errorf("kubeconfig %s does not exist", p)
		}
		if err != nil {
			return nil, "", err
		}
		found++
		mergeKubeconfig(merged, cfg)
	}
	if found == 0 {
		return nil, "", fmt.Errorf("none of the kubeconfig files in $KUBECONFIG exists (%s)", os.Getenv("KUBECONFIG"))
	}
	rc, ns, err := restConfig(merged)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %w", paths[0], err)
	}
	if o.Namespace != "" {
		ns = o.Namespace
	}
	return rc, ns, nil
}

// loadKubeconfigFile decodes one kubeconfig and makes its file paths
// absolute (they are relative to the file).
func loadKubeconfigFile(path string) (*clientcmdapi.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	if len(data) > 0 {
		obj, _, err := clientcmdlatest.Codec.Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		c, ok := obj.(*clientcmdapi.Config)
		if !ok {
			return nil, fmt.Errorf("kubeconfig %s: not a kubeconfig (%T)", path, obj)
		}
		cfg = c
	}
	dir := filepath.Dir(path)
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for _, c := range cfg.Clusters {
		abs(&c.CertificateAuthority)
	}
	for _, a := range cfg.AuthInfos {
		abs(&a.ClientCertificate)
		abs(&a.ClientKey)
		abs(&a.TokenFile)
	}
	return cfg, nil
}

// mergeKubeconfig adds src to dst: the first file to define a name or the
// current context wins, as with kubectl.
func mergeKubeconfig(dst, src *clientcmdapi.Config) {
	if dst.CurrentContext == "" {
		dst.CurrentContext = src.CurrentContext
	}
	for k, v := range src.Clusters {
		if _, ok := dst.Clusters[k]; !ok {
			dst.Clusters[k] = v
		}
	}
	for k, v := range src.AuthInfos {
		if _, ok := dst.AuthInfos[k]; !ok {
			dst.AuthInfos[k] = v
		}
	}
	for k, v := range src.Contexts {
		if _, ok := dst.Contexts[k]; !ok {
			dst.Contexts[k] = v
		}
	}
}

// restConfig turns the current context into a client configuration.
func restConfig(cfg *clientcmdapi.Config) (*rest.Config, string, error) {
	if cfg.CurrentContext == "" {
		return nil, "", errors.New("no current-context is set")
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, "", fmt.Errorf("context %q does not exist", cfg.CurrentContext)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok {
		return nil, "", fmt.Errorf("cluster %q of context %q does not exist", kctx.Cluster, cfg.CurrentContext)
	}
	if cluster.Server == "" {
		return nil, "", fmt.Errorf("cluster %q has no server", kctx.Cluster)
	}
	rc := &rest.Config{
		Host:      cluster.Server,
		UserAgent: "knbox/" + version.Version,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   cluster.InsecureSkipTLSVerify,
			ServerName: cluster.TLSServerName,
			CAFile:     cluster.CertificateAuthority,
			CAData:     cluster.CertificateAuthorityData,
		},
		QPS:   50,
		Burst: 100,
	}
	if cluster.ProxyURL != "" {
		u, err := url.Parse(cluster.ProxyURL)
		if err != nil {
			return nil, "", fmt.Errorf("cluster %q: proxy-url: %w", kctx.Cluster, err)
		}
		rc.Proxy = http.ProxyURL(u)
	}
	if kctx.AuthInfo != "" {
		user, ok := cfg.AuthInfos[kctx.AuthInfo]
		if !ok {
			return nil, "", fmt.Errorf("user %q of context %q does not exist", kctx.AuthInfo, cfg.CurrentContext)
		}
		if user.Exec != nil || user.AuthProvider != nil {
			return nil, "", fmt.Errorf("user %q: exec and auth-provider credentials are not supported by knbox; use a token or a client certificate", kctx.AuthInfo)
		}
		rc.BearerToken = user.Token
		rc.BearerTokenFile = user.TokenFile
		rc.Username, rc.Password = user.Username, user.Password
		rc.CertFile, rc.CertData = user.ClientCertificate, user.ClientCertificateData
		rc.KeyFile, rc.KeyData = user.ClientKey, user.ClientKeyData
	}
	ns := kctx.Namespace
	if ns == "" {
		ns = "default"
	}
	return rc, ns, nil
}
