package pki

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names used in the kubeconfigs that Kubeconfig renders.
const (
	KubeconfigCluster = "knbox"
	KubeconfigUser    = "knbox-admin"
	KubeconfigContext = "knbox"
)

// Kubeconfig renders a kubeconfig (YAML) with one cluster "knbox" (server
// and the CA as certificate-authority-data), one user "knbox-admin" (the
// bearer token) and one context "knbox" (namespace default), which is the
// current context.
func Kubeconfig(server string, caPEM []byte, token string) ([]byte, error) {
	return render(server, caPEM, KubeconfigUser, token, KubeconfigContext, "default")
}

// KubeconfigFor renders a kubeconfig for another user: cluster "knbox",
// user name (a token file's user, or system:serviceaccount:NS:NAME) with
// token, and the current context "name@knbox" in namespace.
func KubeconfigFor(server string, caPEM []byte, name, token, namespace string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("kubeconfig: user name is empty")
	}
	if namespace == "" {
		namespace = "default"
	}
	return render(server, caPEM, name, token, name+"@"+KubeconfigCluster, namespace)
}

func render(server string, caPEM []byte, userName, token, contextName, namespace string) ([]byte, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig server %q: %w", server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kubeconfig server %q: want an https:// URL with a host", server)
	}
	if block, _ := pem.Decode(caPEM); block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("kubeconfig: CA is not a PEM certificate")
	}
	if token == "" {
		return nil, errors.New("kubeconfig: token is empty")
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters[KubeconfigCluster] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	cfg.AuthInfos[userName] = user
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = KubeconfigCluster
	kctx.AuthInfo = userName
	kctx.Namespace = namespace
	cfg.Contexts[contextName] = kctx
	cfg.CurrentContext = contextName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encode kubeconfig: %w", err)
	}
	return out, nil
}
