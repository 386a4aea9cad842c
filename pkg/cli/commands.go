package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/knbox/knbox/pkg/version"
)

// Commands returns the client commands of the knbox binary. Each call
// returns new commands that share one set of connection flags (kubectl's,
// plus --data-dir).
//
// A new command is a function of the session (see getCommand and
// logsCommand) added here; it reaches the server through s.conn (the
// connection: REST configuration, discovery, REST mapper) or the
// session's clients over it, and returns its errors through s.run, which
// words them for users.
func Commands() []*cobra.Command {
	s := newSession()
	cmds := []*cobra.Command{
		applyCommand(s),
		deployCommand(s),
		getCommand(s),
		describeCommand(s),
		waitCommand(s),
		deleteCommand(s),
		apiResourcesCommand(s),
		logsCommand(s),
		imageCommand(s),
		kubeconfigCommand(),
		versionCommand(s),
	}
	for _, c := range cmds {
		c.PersistentPreRun = func(*cobra.Command, []string) { quietLogs() }
	}
	return cmds
}

var quiet sync.Once

// quietLogs stops klog's output: client-go logs through it what it also
// returns as errors, which the commands word for users, so klog's copy
// would only repeat them. klog is global and must be set before other
// goroutines log: the commands call this first thing (in cobra's
// PersistentPreRun, so knbox serve keeps its klog output).
func quietLogs() {
	quiet.Do(func() { klog.SetLogger(logr.Discard()) })
}

// panicError turns a panic in a command into an error: users get a
// message, never a Go stack.
func panicError(r interface{}) error {
	if err, ok := r.(error); ok {
		return fmt.Errorf("the command failed: %w", err)
	}
	return fmt.Errorf("the command failed: %v", r)
}

// session is what the commands of one Commands call share.
type session struct {
	conn *connection

	mu  sync.Mutex
	dyn dynamic.Interface // see dynamicClient
	raw rest.Interface    // see restClient
}

func newSession() *session {
	return &session{conn: newConnection()}
}

// addFlags gives cmd (and its subcommands) the connection flags; namespaced
// says whether it takes -n.
func (s *session) addFlags(cmd *cobra.Command, namespaced bool) {
	s.conn.addFlags(cmd.PersistentFlags(), namespaced)
}

// run adapts fn to cobra: it hands fn the command's streams, sends the
// server's warnings to stderr, ends the command's requests with its
// context, and words fn's error (or a panic) for users (see s.explain).
func (s *session) run(fn func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = s.explain(panicError(r))
			}
		}()
		s.conn.warnings = cmd.ErrOrStderr()
		if ctx := cmd.Context(); ctx != nil {
			s.conn.ctx = ctx
		}
		streams := genericiooptions.IOStreams{In: cmd.InOrStdin(), Out: cmd.OutOrStdout(), ErrOut: cmd.ErrOrStderr()}
		return s.explain(fn(cmd, args, streams))
	}
}

// interruptible ends ctx on SIGINT and SIGTERM.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// versionTimeout bounds how long version waits for the server.
const versionTimeout = 5 * time.Second

func versionCommand(s *session) *cobra.Command {
	cmd := &cobra.Command{
		Use:          "version",
		Short:        "Print the client's version and, if it answers, the server's",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
	}
	s.addFlags(cmd, false)
	cmd.RunE = s.run(func(_ *cobra.Command, _ []string, streams genericiooptions.IOStreams) error {
		fmt.Fprintf(streams.Out, "client: %s (%s)\n", version.Version, version.GitVersion())
		v, err := s.serverVersion()
		if err != nil {
			fmt.Fprintf(streams.Out, "server: unreachable (%v)\n", s.explain(err))
			return nil
		}
		fmt.Fprintf(streams.Out, "server: %s\n", v)
		return nil
	})
	return cmd
}

func (s *session) serverVersion() (string, error) {
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return "", err
	}
	rc.Timeout = versionTimeout
	d, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return "", err
	}
	v, err := d.ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}
