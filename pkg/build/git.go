package build

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/pod"
)

// GitLimits bound the clone of a Build's source.git (config builds.gitTimeout
// and builds.maxGitFetchBytes); the checkout is bounded by the
// Options.SourceLimits, as an upload is.
type GitLimits struct {
	// Timeout bounds the fetch and the checkout (0: DefaultGitTimeout).
	Timeout time.Duration
	// MaxFetchBytes bounds the bytes read from the network (0:
	// DefaultMaxGitFetchBytes).
	MaxFetchBytes int64
}

// Defaults of GitLimits.
const (
	DefaultGitTimeout       = 5 * time.Minute
	DefaultMaxGitFetchBytes = 512 << 20
)

// ReasonGitCloneFailed is the reason of a Build whose source.git could not
// be cloned.
const ReasonGitCloneFailed = "GitCloneFailed"

// The clone is go-git's (github.com/go-git/go-git/v5, the pure-Go git
// client the Go ecosystem uses: no git binary on the host, and every byte
// it reads comes through a dialer knbox hands it). It runs in knbox, before
// the first step, with the build pod's network view: each connection is
// made inside the pod's network namespace (network.NS.DialIP) and names are
// resolved by the pod's name servers, reached from inside it. A tenant thus
// reaches through a clone exactly what its steps reach (the relayed
// registries on the pod's loopback, the outside only with egress), never
// the host's loopback or private services.
//
// go-git picks its transport per URL scheme from a process-wide table; knbox
// installs http and https once, with a client whose dialer comes from the
// request's context (no context, no dial) and which never pools
// connections (a pooled connection would carry one pod's network view into
// another clone). Only http and https URLs are cloned (validation refuses
// the others; cloneGit checks again): go-git's file and ssh transports would
// act as the host.

type netViewKey struct{}

// netView is one clone's network: its dialer and its fetch budget.
type netView struct {
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	budget *atomic.Int64
}

var installGit sync.Once

func installGitTransport() {
	installGit.Do(func() {
		tr := &http.Transport{
			Proxy:                  nil, // the host's proxy settings are the host's view
			DialContext:            dialFromContext,
			DisableKeepAlives:      true,
			TLSHandshakeTimeout:    30 * time.Second,
			ResponseHeaderTimeout:  time.Minute,
			MaxResponseHeaderBytes: 1 << 20,
		}
		c := githttp.NewClientWithOptions(&http.Client{Transport: tr}, nil)
		client.InstallProtocol("http", c)
		client.InstallProtocol("https", c)
	})
}

// dialFromContext dials addr (host:port) with the clone's network view.
func dialFromContext(ctx context.Context, network, addr string) (net.Conn, error) {
	v, ok := ctx.Value(netViewKey{}).(*netView)
	if !ok {
		return nil, errors.New("git: no network view for this fetch")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = v.lookup(ctx, host); err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips[:min(len(ips), 4)] {
		c, err := v.dial(ctx, "tcp", net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return &budgetConn{Conn: c, budget: v.budget}, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// errFetchBudget is a clone that read more than its MaxFetchBytes.
var errFetchBudget = errors.New("fetch budget exhausted")

// budgetConn fails reads once the clone's fetch budget is spent.
type budgetConn struct {
	net.Conn
	budget *atomic.Int64
}

func (c *budgetConn) Read(p []byte) (int, error) {
	if c.budget.Load() <= 0 {
		return 0, errFetchBudget
	}
	n, err := c.Conn.Read(p)
	if c.budget.Add(-int64(n)) < 0 {
		return n, errFetchBudget
	}
	return n, err
}

// gitSeed is the Fill of a Build's workspace with source.git.
func gitSeed(src buildv1alpha1.GitSourceSpec, lim GitLimits, alim image.ArchiveLimits, tmpRoot string) func(ctx context.Context, dir string, n pod.SeedNet) error {
	return func(ctx context.Context, dir string, n pod.SeedNet) error {
		if n.NS == nil {
			return fmt.Errorf("git clone %s: the build has no network namespace", src.URL)
		}
		v := &netView{dial: n.NS.DialIP, lookup: nsLookup(n)}
		return cloneGit(ctx, src, v, lim, alim, tmpRoot, dir)
	}
}

// nsLookup resolves names with the pod's name servers, asked from inside
// its network namespace. (Go's resolver reads the host's /etc/hosts first;
// what it finds there is dialled from inside the namespace all the same.)
func nsLookup(n pod.SeedNet) func(ctx context.Context, host string) ([]netip.Addr, error) {
	var servers []string
	for _, s := range n.Nameservers {
		if ip, err := netip.ParseAddr(s); err == nil {
			servers = append(servers, netip.AddrPortFrom(ip, 53).String())
		}
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if len(servers) == 0 {
			return nil, errors.New("the build's network has no name server (egress is off)")
		}
		var errs []error
		for _, s := range servers {
			c, err := n.NS.DialIP(ctx, network, s)
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return r.LookupNetIP(ctx, "ip", host)
	}
}

// cloneGit fetches src with the network view v into a bare repository
// under tmpRoot, then writes the revision's tree into dir through
// image.UnpackArchive (the safety and bounds of an upload).
func cloneGit(ctx context.Context, src buildv1alpha1.GitSourceSpec, v *netView, lim GitLimits, alim image.ArchiveLimits, tmpRoot, dir string) (err error) {
	if lim.Timeout <= 0 {
		lim.Timeout = DefaultGitTimeout
	}
	if lim.MaxFetchBytes <= 0 {
		lim.MaxFetchBytes = DefaultMaxGitFetchBytes
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("git clone %s: %w", src.URL, err)
		}
	}()
	if err := buildv1alpha1.CheckGitURL(src.URL); err != nil {
		return err
	}
	installGitTransport()
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	v.budget = &atomic.Int64{}
	v.budget.Store(lim.MaxFetchBytes)
	ctx = context.WithValue(ctx, netViewKey{}, v)

	var repo *git.Repository
	var hash plumbing.Hash
	var tried []error
	for _, o := range cloneAttempts(src) {
		tmp, err := os.MkdirTemp(tmpRoot, ".git-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		st := filesystem.NewStorage(osfs.New(tmp), cache.NewObjectLRUDefault())
		ref := o.ReferenceName // Clone sets it to HEAD when empty
		o.URL = src.URL
		o.NoCheckout = true
		o.Tags = git.NoTags
		r, err := git.CloneContext(ctx, st, nil, o)
		switch {
		case v.budget.Load() <= 0:
			return fmt.Errorf("the fetch read more than %d bytes (builds.maxGitFetchBytes)", lim.MaxFetchBytes)
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("not done within %v (builds.gitTimeout): %w", lim.Timeout, err)
		case err != nil && isRefNotFound(err):
			tried = append(tried, err)
			continue
		case err != nil:
			return fmt.Errorf("the repository was unreachable from the build's network: %w", err)
		}
		h, err := resolveRevision(r, ref, src.Revision)
		if err != nil {
			tried = append(tried, err)
			continue
		}
		repo, hash = r, h
		break
	}
	if repo == nil {
		return fmt.Errorf("revision %q is no branch, tag or commit of the repository: %w", src.Revision, errors.Join(tried...))
	}
	commit, err := repo.CommitObject(hash)
	if err != nil {
		return fmt.Errorf("revision %q: %w", src.Revision, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return fmt.Errorf("revision %q: %w", src.Revision, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTree(ctx, tree, pw)) }()
	err = image.UnpackArchive(ctx, dir, pr, alim)
	pr.CloseWithError(errors.New("unpack ended"))
	return err
}

// cloneAttempts are the fetches that may find src.Revision, in order. A
// revision is what Knative Build's git source took: a branch, a tag or a
// commit ("" is the remote's HEAD; a full ref name "refs/..." is fetched
// as named). A branch or a tag is fetched alone at depth 1; a commit needs
// the history (a server need not serve an unadvertised commit by itself),
// so it is a full fetch of the branches.
func cloneAttempts(src buildv1alpha1.GitSourceSpec) []*git.CloneOptions {
	r := src.Revision
	switch {
	case r == "":
		return []*git.CloneOptions{{Depth: 1, SingleBranch: true}}
	case strings.HasPrefix(r, "refs/"):
		return []*git.CloneOptions{{Depth: 1, SingleBranch: true, ReferenceName: plumbing.ReferenceName(r)}}
	}
	var out []*git.CloneOptions
	if !buildv1alpha1.IsCommitRevision(r) || len(r) < 40 {
		out = append(out,
			&git.CloneOptions{Depth: 1, SingleBranch: true, ReferenceName: plumbing.NewBranchReferenceName(r)},
			&git.CloneOptions{Depth: 1, SingleBranch: true, ReferenceName: plumbing.NewTagReferenceName(r)})
	}
	if buildv1alpha1.IsCommitRevision(r) {
		out = append(out, &git.CloneOptions{})
	}
	return out
}

func isRefNotFound(err error) bool {
	var nm git.NoMatchingRefSpecError
	return errors.As(err, &nm) || errors.Is(err, plumbing.ErrReferenceNotFound)
}

// resolveRevision is the commit a clone fetched for ref (a branch or a
// tag: what it points at, an annotated tag peeled), for the remote's HEAD
// (no ref, no revision), or for rev (a commit, after a full fetch).
func resolveRevision(repo *git.Repository, ref plumbing.ReferenceName, rev string) (plumbing.Hash, error) {
	switch {
	case ref != "":
		r, err := repo.Reference(ref, true)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%s: %w", ref, err)
		}
		if tag, err := repo.TagObject(r.Hash()); err == nil {
			c, err := tag.Commit()
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("%s: %w", ref, err)
			}
			return c.Hash, nil
		}
		return r.Hash(), nil
	case rev == "":
		head, err := repo.Head()
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("the remote's HEAD: %w", err)
		}
		return head.Hash(), nil
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s is no commit of the repository: %w", rev, err)
	}
	if _, err := repo.CommitObject(*h); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s is no commit of the repository: %w", rev, err)
	}
	return *h, nil
}

// maxSymlinkTarget bounds a symlink's target (Linux: PATH_MAX).
const maxSymlinkTarget = 4096

// writeTree writes the files of tree as a tar stream: regular files with
// their mode, symlinks as symlinks (UnpackArchive never writes through
// them), submodules skipped.
func writeTree(ctx context.Context, tree *object.Tree, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := tree.Files().ForEach(func(f *object.File) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{Name: f.Name, Format: tar.FormatPAX}
		switch f.Mode {
		case filemode.Symlink:
			if f.Size > maxSymlinkTarget {
				return fmt.Errorf("%s: a symlink target of %d bytes", f.Name, f.Size)
			}
			target, err := f.Contents()
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
			return tw.WriteHeader(hdr)
		case filemode.Executable:
			hdr.Mode = 0o755
		case filemode.Regular, filemode.Deprecated:
			hdr.Mode = 0o644
		default:
			return nil
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, f.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(tw, r)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
