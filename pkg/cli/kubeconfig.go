package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/knbox/knbox/pkg/kubeclient"
	"github.com/knbox/knbox/pkg/pki"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// KubeconfigOptions say which kubeconfig `knbox kubeconfig` makes.
type KubeconfigOptions struct {
	Options
	// User is "" for the administrator's kubeconfig (the data dir's), a
	// user of TokenFile, or a ServiceAccount as
	// system:serviceaccount:NAMESPACE:NAME (a token is requested for it).
	User      string
	TokenFile string
	// Duration of a ServiceAccount's token: 0 is the server's default
	// (one hour), as for kubectl create token.
	Duration time.Duration
}

// Kubeconfig returns the kubeconfig o asks for, and for a ServiceAccount
// the expiry of its token.
func Kubeconfig(ctx context.Context, o KubeconfigOptions) ([]byte, time.Time, error) {
	if o.User == "" {
		b, err := ReadKubeconfig(o.DataDirPath())
		return b, time.Time{}, err
	}
	// The server and its CA are those of the kubeconfig the options
	// name (the data dir's by default).
	rc, _, err := o.Options.Load()
	if err != nil {
		return nil, time.Time{}, err
	}
	caPEM := rc.CAData
	if len(caPEM) == 0 && rc.CAFile != "" {
		if caPEM, err = os.ReadFile(rc.CAFile); err != nil {
			return nil, time.Time{}, fmt.Errorf("read the server's CA: %w", err)
		}
	}
	if ns, name, ok := serviceaccount.SplitUsername(o.User); ok {
		kube, err := kubeclient.NewForConfig(rc)
		if err != nil {
			return nil, time.Time{}, err
		}
		tr := &authenticationv1.TokenRequest{}
		if o.Duration != 0 {
			secs := int64(o.Duration / time.Second)
			tr.Spec.ExpirationSeconds = &secs
		}
		got, err := kube.ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("request a token for %s: %w", o.User, err)
		}
		namespace := o.Namespace
		if namespace == "" {
			namespace = ns
		}
		kc, err := pki.KubeconfigFor(rc.Host, caPEM, o.User, got.Status.Token, namespace)
		return kc, got.Status.ExpirationTimestamp.Time, err
	}
	if o.TokenFile == "" {
		return nil, time.Time{}, fmt.Errorf("%q is not a ServiceAccount (system:serviceaccount:NAMESPACE:NAME): name the token file it is in with --token-auth-file", o.User)
	}
	token, _, err := pki.UserToken(o.TokenFile, o.User)
	if err != nil {
		return nil, time.Time{}, err
	}
	kc, err := pki.KubeconfigFor(rc.Host, caPEM, o.User, token, o.Namespace)
	return kc, time.Time{}, err
}

// writePrivate writes a credential file readable by its owner only: a new
// file made with mode 0600 and renamed over path, so an existing file with
// a wider mode never holds the new secret. A missing directory is made
// mode 0700, as kubectl makes ~/.kube, so `-o ~/.kube/knbox.yaml` works on
// a fresh machine.
func writePrivate(path string, data []byte) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func kubeconfigCommand() *cobra.Command {
	var (
		o      KubeconfigOptions
		output string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig [--user NAME] [-o FILE]",
		Short: "Print or write a kubeconfig for the local knbox server (for kubectl and other clients)",
		Long: `Print the kubeconfig that knbox serve wrote into its data directory: the
server's URL, its CA and the admin token. Keep it secret.

With --user, a kubeconfig for another identity: a user of the token file
(--token-auth-file, kube-apiserver's CSV), or a ServiceAccount named
system:serviceaccount:NAMESPACE:NAME, for which a token is requested with
the administrator's kubeconfig (or --kubeconfig) and expires after
--duration. The context's namespace is -n, else the ServiceAccount's, else
"default".

With -o FILE the kubeconfig is written to FILE with mode 0600 (replacing
it), which a shell redirection does not do.`,
		Example: `  knbox kubeconfig -o ~/.kube/knbox && KUBECONFIG=~/.kube/knbox kubectl get ksvc
  knbox kubeconfig --user alice --token-auth-file /etc/knbox/tokens.csv -n team-a -o alice.kubeconfig
  knbox kubeconfig --user system:serviceaccount:team-a:deployer --duration 24h -o deployer.kubeconfig`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	addDataDirFlag(cmd, &o.Options)
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig whose credentials request a ServiceAccount's token (default: $KUBECONFIG if set, else <data-dir>/kubeconfig)")
	f.StringVar(&o.User, "user", "", "make the kubeconfig of this user: a token file's user or system:serviceaccount:NAMESPACE:NAME")
	f.StringVar(&o.TokenFile, "token-auth-file", "", "the token file (token,user,uid,\"groups\") that holds --user's token")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "namespace of the kubeconfig's context")
	f.DurationVar(&o.Duration, "duration", 0, "lifetime of a ServiceAccount's token (0: the server's default, one hour)")
	f.StringVarP(&output, "output", "o", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.User == "" && (o.TokenFile != "" || o.Duration != 0 || o.Namespace != "" || o.Kubeconfig != "") {
			return errors.New("--token-auth-file, --duration, --namespace and --kubeconfig go with --user")
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		b, exp, err := Kubeconfig(ctx, o)
		if err != nil {
			return err
		}
		if !exp.IsZero() {
			fmt.Fprintf(cmd.ErrOrStderr(), "the token expires at %s\n", exp.Local().Format(time.RFC3339))
		}
		if output == "" {
			_, err = cmd.OutOrStdout().Write(b)
			return err
		}
		if err := writePrivate(output, b); err != nil {
			return err
		}
		_, err = io.WriteString(cmd.ErrOrStderr(), "wrote "+output+" (mode 0600)\n")
		return err
	}
	return cmd
}
