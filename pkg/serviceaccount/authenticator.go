package serviceaccount

import (
	"fmt"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Keys of the user's extra that a ServiceAccount token sets, as
// kube-apiserver's.
const (
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
	ExtraPodName      = "authentication.kubernetes.io/pod-name"
	ExtraPodUID       = "authentication.kubernetes.io/pod-uid"
)

// Lookup reads the objects a token's validity depends on.
type Lookup interface {
	// ServiceAccountUID returns the UID of the ServiceAccount namespace/name,
	// or an error when it does not exist (or cannot be read).
	ServiceAccountUID(namespace, name string) (string, error)
	// ObjectUID returns the UID of the object of kind ("Pod", "Secret")
	// namespace/name, or an error when it does not exist or the kind is
	// not known.
	ObjectUID(kind, namespace, name string) (string, error)
}

// Authenticator turns ServiceAccount tokens into users.
type Authenticator struct {
	signer *Signer
	lookup Lookup
}

// NewAuthenticator returns an Authenticator for the tokens s signs, checking
// them against lookup.
func NewAuthenticator(s *Signer, lookup Lookup) *Authenticator {
	return &Authenticator{signer: s, lookup: lookup}
}

// Authenticate returns the user a token stands for,
// system:serviceaccount:NAMESPACE:NAME in groups system:serviceaccounts and
// system:serviceaccounts:NAMESPACE, when Verify accepts it (the API
// audiences), its ServiceAccount exists with the UID it was issued for, and
// the object it is bound to (if any) exists with the UID it was bound to.
// Any other token is an error wrapping ErrInvalid.
func (a *Authenticator) Authenticate(token string) (user.Info, error) {
	c, err := a.signer.Verify(token, nil)
	if err != nil {
		return nil, err
	}
	uid, err := a.lookup.ServiceAccountUID(c.Namespace, c.ServiceAccount)
	if err != nil {
		return nil, fmt.Errorf("%w: service account %s/%s: %v", ErrInvalid, c.Namespace, c.ServiceAccount, err)
	}
	if uid != c.ServiceAccountUID {
		return nil, fmt.Errorf("%w: service account %s/%s was deleted (its UID is now %s, the token's %s)", ErrInvalid, c.Namespace, c.ServiceAccount, uid, c.ServiceAccountUID)
	}
	u := &user.DefaultInfo{
		Name:   Username(c.Namespace, c.ServiceAccount),
		UID:    c.ServiceAccountUID,
		Groups: Groups(c.Namespace),
		Extra:  map[string][]string{},
	}
	if c.ID != "" {
		u.Extra[ExtraCredentialID] = []string{"JTI=" + c.ID}
	}
	if b := c.Bound; b != nil {
		uid, err := a.lookup.ObjectUID(b.Kind, c.Namespace, b.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: bound %s %s/%s: %v", ErrInvalid, b.Kind, c.Namespace, b.Name, err)
		}
		if uid != b.UID {
			return nil, fmt.Errorf("%w: bound %s %s/%s was deleted", ErrInvalid, b.Kind, c.Namespace, b.Name)
		}
		if b.Kind == "Pod" {
			u.Extra[ExtraPodName] = []string{b.Name}
			u.Extra[ExtraPodUID] = []string{b.UID}
		}
	}
	return u, nil
}
