package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/knbox/knbox/pkg/version"
)

// DefaultDataDir is where `knbox serve` keeps its state (and the kubeconfig
// the client commands read) unless told otherwise.
const DefaultDataDir = "/var/lib/knbox"

// DataDirPath returns the data directory dir means: dir itself, else
// $KNBOX_DATA_DIR, else DefaultDataDir.
func DataDirPath(dir string) string {
	if dir != "" {
		return dir
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

// Options name a kubeconfig as the client commands' flags do, for code
// that needs a client configuration outside a command's connection
// (knbox kubeconfig --user).
type Options struct {
	DataDir    string // "" means $KNBOX_DATA_DIR, else DefaultDataDir
	Kubeconfig string // "" means $KUBECONFIG, else <DataDir>/kubeconfig
	Namespace  string // "" means the context's, else "default"
}

// DataDirPath returns the data directory the options mean.
func (o Options) DataDirPath() string { return DataDirPath(o.DataDir) }

// Load returns the client configuration of the kubeconfig's current
// context and the namespace to use, by the client commands' rules.
func (o Options) Load() (*rest.Config, string, error) {
	c := newConnection()
	c.dataDir = o.DataDir
	c.flags.kubeconfig = o.Kubeconfig
	c.flags.namespace = o.Namespace
	rc, err := c.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := c.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	return rc, ns, nil
}

// addDataDirFlag gives cmd --data-dir.
func addDataDirFlag(cmd *cobra.Command, o *Options) {
	cmd.PersistentFlags().StringVar(&o.DataDir, "data-dir", "", dataDirUsage)
}

const dataDirUsage = "the knbox server's data directory, whose kubeconfig is used when neither --kubeconfig nor $KUBECONFIG is set (default: $KNBOX_DATA_DIR if set, else " + DefaultDataDir + ")"

// connection is how the client commands reach the server: kubectl's
// connection flags (clientcmd's rules: --kubeconfig, --context, --cluster,
// --user, --token, --server, -n, exec plugins in the kubeconfig, ...)
// plus --data-dir. It offers what the commands need of it: the kubeconfig
// loader, the REST configuration, discovery and a REST mapper.
//
// The flags are knbox's own over clientcmd, not cli-runtime's ConfigFlags:
// that package (genericclioptions) imports cli-runtime's resource builder
// and with it kustomize and starlark, whose packages initialise and stay
// resident in every knbox process, `knbox serve` included. The flags keep
// ConfigFlags's names, meanings and defaults.
//
// Two choices differ from kubectl, both because the usual server is the
// local knbox:
//   - without --kubeconfig and $KUBECONFIG, the kubeconfig is the one knbox
//     serve wrote into its data dir (--data-dir, $KNBOX_DATA_DIR,
//     /var/lib/knbox), not ~/.kube/config;
//   - discovery is cached in memory for one command, not on disk for six
//     hours: it is one local request, and a stale disk cache would hide the
//     kinds a newer knbox serves.
//
// Flags for what knbox does not do are left out: no disk cache (see
// above), no impersonation, no basic auth.
type connection struct {
	flags   connFlags
	dataDir string
	// warnings receives the server's warnings and ctx ends every request
	// (both set when a command runs).
	warnings io.Writer
	ctx      context.Context

	once sync.Once
	err  error // the kubeconfig cannot be found

	lmu    sync.Mutex // guards loader (discovery, under mu, needs it)
	loader clientcmd.ClientConfig

	mu     sync.Mutex
	disc   discovery.CachedDiscoveryInterface
	mapper meta.RESTMapper
}

// connFlags are the connection flags' values ("" or false: not given).
type connFlags struct {
	kubeconfig     string
	context        string
	cluster        string
	user           string
	namespace      string
	server         string
	tlsServerName  string
	insecure       bool
	certFile       string
	keyFile        string
	caFile         string
	token          string
	requestTimeout string
	noCompression  bool
}

func newConnection() *connection {
	return &connection{warnings: io.Discard, ctx: context.Background(), flags: connFlags{requestTimeout: "0"}}
}

// wrap sets what every request of the commands shares: the user agent,
// the server's warnings to stderr, and the command's context.
func (c *connection) wrap(rc *rest.Config) *rest.Config {
	rc.UserAgent = "knbox/" + version.Version
	// As kubectl prints them (Knative warns about insecure defaults).
	rc.WarningHandler = rest.NewWarningWriter(c.warnings, rest.WarningWriterOptions{Deduplicate: true})
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &boundTransport{ctx: c.ctx, next: rt} })
	return rc
}

// boundTransport ends its requests, and the reading of their bodies
// (watches, log streams), when ctx ends.
type boundTransport struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t *boundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(t.ctx, cancel)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	resp.Body = &boundBody{ReadCloser: resp.Body, done: func() { stop(); cancel() }}
	return resp, nil
}

// boundBody releases its request's context when closed.
type boundBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *boundBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// addFlags adds the connection flags; namespaced says whether the command
// takes -n.
func (c *connection) addFlags(fs *pflag.FlagSet, namespaced bool) {
	f := &c.flags
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig to use (default: $KUBECONFIG if set, else <data-dir>/kubeconfig)")
	fs.StringVar(&f.context, "context", "", "the name of the kubeconfig context to use")
	fs.StringVar(&f.cluster, "cluster", "", "the name of the kubeconfig cluster to use")
	fs.StringVar(&f.user, "user", "", "the name of the kubeconfig user to use")
	if namespaced {
		fs.StringVarP(&f.namespace, "namespace", "n", "", "the namespace of the request (default: the context's, else default)")
	}
	fs.StringVarP(&f.server, "server", "s", "", "the address and port of the API server")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "server name to check the server's certificate against (default: the server's host name)")
	fs.BoolVar(&f.insecure, "insecure-skip-tls-verify", false, "do not check the server's certificate (insecure)")
	fs.StringVar(&f.certFile, "client-certificate", "", "path to a client certificate file for TLS")
	fs.StringVar(&f.keyFile, "client-key", "", "path to a client key file for TLS")
	fs.StringVar(&f.caFile, "certificate-authority", "", "path to a certificate file of the certificate authority")
	fs.StringVar(&f.token, "token", "", "bearer token for authentication to the API server")
	fs.StringVar(&f.requestTimeout, "request-timeout", f.requestTimeout, "how long to wait for a single request (e.g. 1s, 2m); 0 waits forever")
	fs.BoolVar(&f.noCompression, "disable-compression", false, "ask the server not to compress its responses")
	fs.StringVar(&c.dataDir, "data-dir", "", dataDirUsage)
}

// prepare points the loader at the data dir's kubeconfig when no other is
// named; it runs once, after the flags are parsed.
func (c *connection) prepare() {
	c.once.Do(func() {
		if c.flags.kubeconfig != "" || os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
			return
		}
		dir := DataDirPath(c.dataDir)
		p := filepath.Join(dir, "kubeconfig")
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			c.err = noKubeconfig(dir)
		}
		c.flags.kubeconfig = p
	})
}

// ToRawKubeConfigLoader returns the kubeconfig loader with the flags as
// overrides (built once, after the flags are parsed).
func (c *connection) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	c.prepare()
	if c.err != nil {
		return failedConfig{c.err}
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.loader != nil {
		return c.loader
	}
	f := c.flags
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	rules.ExplicitPath = f.kubeconfig
	o := &clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults, Timeout: f.requestTimeout, CurrentContext: f.context}
	o.AuthInfo.ClientCertificate = f.certFile
	o.AuthInfo.ClientKey = f.keyFile
	o.AuthInfo.Token = f.token
	o.ClusterInfo.Server = f.server
	o.ClusterInfo.TLSServerName = f.tlsServerName
	o.ClusterInfo.CertificateAuthority = f.caFile
	o.ClusterInfo.InsecureSkipTLSVerify = f.insecure
	o.ClusterInfo.DisableCompression = f.noCompression
	o.Context.Cluster = f.cluster
	o.Context.AuthInfo = f.user
	o.Context.Namespace = f.namespace
	c.loader = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, o)
	return c.loader
}

// ToRESTConfig returns the configuration of the commands' requests.
func (c *connection) ToRESTConfig() (*rest.Config, error) {
	rc, err := c.ToRawKubeConfigLoader().ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, errors.New("the kubeconfig names no server: give --kubeconfig, --server or --context, or start the server with `knbox serve`")
	}
	if err != nil {
		return nil, err
	}
	return c.wrap(rc), nil
}

// namespace returns the namespace the command means and whether -n (or
// the context) named it explicitly.
func (c *connection) namespace() (string, bool, error) {
	return c.ToRawKubeConfigLoader().Namespace()
}

// ToDiscoveryClient returns discovery, cached in memory for the command.
func (c *connection) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.discovery()
}

func (c *connection) discovery() (discovery.CachedDiscoveryInterface, error) {
	if c.disc != nil {
		return c.disc, nil
	}
	rc, err := c.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	rc.Burst = 300 // discovery reads every group version at once
	d, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	c.disc = memory.NewMemCacheClient(d)
	return c.disc, nil
}

// ToRESTMapper maps resource types and kinds: discovery's resources with
// their short names, as kubectl maps them.
func (c *connection) ToRESTMapper() (meta.RESTMapper, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mapper != nil {
		return c.mapper, nil
	}
	d, err := c.discovery()
	if err != nil {
		return nil, err
	}
	c.mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(d), d, func(w string) {
		fmt.Fprintln(c.warnings, "Warning:", w)
	})
	return c.mapper, nil
}

// failedConfig is a clientcmd.ClientConfig that fails every call with err.
type failedConfig struct{ err error }

func (f failedConfig) RawConfig() (clientcmdapi.Config, error) { return clientcmdapi.Config{}, f.err }
func (f failedConfig) ClientConfig() (*rest.Config, error)     { return nil, f.err }
func (f failedConfig) Namespace() (string, bool, error)        { return "", false, f.err }
func (f failedConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}
