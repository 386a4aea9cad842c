package apiserver

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"

	"github.com/knbox/knbox/pkg/store"
)

// Paged lists follow kube-apiserver's: limit caps the items of a page,
// continue is the token of the page before (k8s.io/apiserver's encoding:
// the resourceVersion of the first page and the key after which the next
// page starts), and every page of one list is read at the first page's
// revision, so the pages together are one consistent snapshot. knbox's
// store reads a past revision from its event log; when the log no longer
// holds what that needs the token has expired: 410 Expired, with a token
// that continues at the latest revision (inconsistently), as Kubernetes
// does after an etcd compaction.

const (
	continueExpired = "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter."
	inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response " +
		"to retrieve the remainder of the results. Continuing with the provided token results in an " +
		"inconsistent list - objects that were created, modified, or deleted between the time the first " +
		"chunk was returned and now may show up in the list."
)

// tokenPrefix is the key prefix of continue tokens: their keys are
// "/name" in one namespace (or of a cluster-scoped kind), "/namespace/name"
// across namespaces.
const tokenPrefix = "/"

// paging is what a list request asks of the store.
type paging struct {
	opts store.PageOptions
	// token: the request continues a list (the start comes from it).
	token bool
	// exact: the revision was asked for with resourceVersion.
	exact bool
}

// parsePaging reads limit, continue, resourceVersion and
// resourceVersionMatch of a list in namespace; across: see decodeContinue.
func parsePaging(q url.Values, namespace string, across bool, cur int64) (paging, error) {
	var p paging
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return p, apierrors.NewBadRequest(fmt.Sprintf("limit: invalid value %q: must be an integer", l))
		}
		// As Kubernetes: a limit of 0 or less is no limit.
		p.opts.Limit = int(max(min(n, 1<<30), 0))
	}
	rv := q.Get("resourceVersion")
	match := q.Get("resourceVersionMatch")
	switch metav1.ResourceVersionMatch(match) {
	case "", metav1.ResourceVersionMatchExact, metav1.ResourceVersionMatchNotOlderThan:
	default:
		return p, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch: unsupported value %q: supported values: %q, %q",
			match, metav1.ResourceVersionMatchExact, metav1.ResourceVersionMatchNotOlderThan))
	}
	if match != "" && rv == "" {
		return p, apierrors.NewBadRequest("resourceVersionMatch: forbidden unless resourceVersion is provided")
	}
	if c := q.Get("continue"); c != "" {
		if rv != "" && rv != "0" {
			return p, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		if match != "" {
			return p, apierrors.NewBadRequest("resourceVersionMatch: forbidden when using continue")
		}
		ns, name, rev, err := decodeContinue(c, namespace, across)
		if err != nil {
			return p, err
		}
		p.token = true
		p.opts.StartNamespace, p.opts.StartName = ns, name
		if rev > 0 { // -1: continue at the latest revision
			p.opts.Revision = rev
		}
		return p, nil
	}
	if rv == "" || rv == "0" {
		if match == string(metav1.ResourceVersionMatchExact) {
			return p, apierrors.NewBadRequest("resourceVersionMatch: \"Exact\" is forbidden for resourceVersion \"0\"")
		}
		return p, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n <= 0 {
		return p, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion: invalid value %q: must be a resourceVersion returned by the server", rv))
	}
	switch {
	case match == string(metav1.ResourceVersionMatchExact), match == "" && p.opts.Limit > 0:
		// As Kubernetes: a paged list with a resourceVersion (and no
		// match) is read at that revision.
		p.opts.Revision, p.exact = n, true
	case n > cur:
		// NotOlderThan (or the legacy unpaged list) a revision not reached.
		return p, storage.NewTooLargeResourceVersionError(uint64(n), uint64(cur), 1)
	}
	return p, nil
}

// decodeContinue reads a continue token: the position it starts at and its
// revision (-1: the latest). Keys of a list across namespaces carry the
// namespace (across); otherwise the namespace is the list's. A malformed
// token is a 400.
func decodeContinue(token, namespace string, across bool) (ns, start string, rev int64, err error) {
	key, rev, err := storage.DecodeContinue(token, tokenPrefix)
	if err != nil {
		return "", "", 0, apierrors.NewBadRequest(fmt.Sprintf("continue: invalid value: %v", err))
	}
	if rev < -1 {
		return "", "", 0, apierrors.NewBadRequest(fmt.Sprintf("continue: invalid value: resourceVersion %d", rev))
	}
	key = strings.TrimPrefix(key, tokenPrefix)
	if !across {
		return namespace, key, rev, nil
	}
	ns, start, ok := strings.Cut(key, "/")
	if !ok || start == "" {
		return "", "", 0, apierrors.NewBadRequest(fmt.Sprintf("continue: invalid value: key %q names no namespace and name", key))
	}
	return ns, start, rev, nil
}

// encodeContinue is the token of a page that starts at position (ns,
// start) at rev (-1: the latest); see decodeContinue. The position after
// the object ns/name is (ns, name + "\x00").
func encodeContinue(ns, start string, across bool, rev int64) (string, error) {
	key := start
	if across {
		key = ns + "/" + start
	}
	return storage.EncodeContinue(tokenPrefix+key, tokenPrefix, rev)
}

// pageError maps the store's errors of a paged list.
func pageError(err error, p paging, across bool, cur int64) error {
	switch {
	case errors.Is(err, store.ErrGone) && p.token:
		tok, terr := encodeContinue(p.opts.StartNamespace, p.opts.StartName, across, -1)
		if terr != nil {
			return apierrors.NewResourceExpired(continueExpired)
		}
		se := apierrors.NewResourceExpired(inconsistentContinue)
		se.ErrStatus.ListMeta.Continue = tok
		return se
	case errors.Is(err, store.ErrGone):
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", p.opts.Revision, cur))
	case errors.Is(err, store.ErrFuture):
		return storage.NewTooLargeResourceVersionError(uint64(p.opts.Revision), uint64(cur), 1)
	}
	return err
}
