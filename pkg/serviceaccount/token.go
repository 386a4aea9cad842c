// Package serviceaccount issues and verifies the tokens of ServiceAccounts
// as kube-apiserver does for bound tokens (TokenRequest and projected
// serviceAccountToken volumes): JWTs signed with ES256 by the data dir's
// key (pkg/pki), with the claims kube-apiserver puts in them (iss, sub, aud,
// exp, iat, nbf, jti, kubernetes.io{namespace, serviceaccount{name, uid},
// pod|secret{name, uid}}).
//
// It owns the token format and its checks (signature, issuer, audience,
// time) and the identity a token stands for
// (system:serviceaccount:NAMESPACE:NAME). Whether the ServiceAccount and
// the bound object still exist is asked of the caller through Lookup; the
// package must not import the API server, the store or the data plane.
package serviceaccount

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "gopkg.in/square/go-jose.v2"
	"gopkg.in/square/go-jose.v2/jwt"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Limits and defaults of token lifetimes, as kube-apiserver's.
const (
	// DefaultExpirationSeconds is the lifetime of a token whose request
	// names none.
	DefaultExpirationSeconds int64 = 3600
	// MinExpirationSeconds is the shortest lifetime a request may ask for.
	MinExpirationSeconds int64 = 600
	// MaxExpirationSeconds is the longest lifetime the API accepts at all
	// (2^32 s); the configured maximum caps it further.
	MaxExpirationSeconds int64 = 1 << 32
	// DefaultMaxTokenExpiration caps every token's lifetime unless
	// configured otherwise (serviceAccounts.maxTokenExpiration).
	DefaultMaxTokenExpiration = 365 * 24 * time.Hour
	// DefaultIssuer is the iss claim, and the audience the API accepts,
	// unless configured otherwise: kubeadm's default.
	DefaultIssuer = "https://kubernetes.default.svc.cluster.local"
	// MaxTokenBytes bounds what Verify parses, and so what Sign may make
	// (a request with audiences enough to pass it is refused).
	MaxTokenBytes = 16 << 10
	// leeway is the clock skew tolerated on exp and nbf, as kube-apiserver.
	leeway = time.Minute
)

// Errors of Verify and Sign.
var (
	// ErrInvalid wraps every reason a token is refused.
	ErrInvalid = errors.New("invalid service account token")
	// ErrTooLarge: the claims (too many or too long audiences) make a
	// token longer than MaxTokenBytes.
	ErrTooLarge = errors.New("token too large")
)

// BoundObject is what a token is bound to besides its ServiceAccount: it
// stops working when that object is gone (kube-apiserver binds to Pods and
// Secrets).
type BoundObject struct {
	Kind string // "Pod" or "Secret"
	Name string
	UID  string
}

// Claims are the facts a token carries.
type Claims struct {
	Namespace      string
	ServiceAccount string
	// ServiceAccountUID binds the token to one incarnation of the
	// ServiceAccount: deleting and recreating it invalidates the token.
	ServiceAccountUID string
	Audiences         []string
	IssuedAt, Expiry  time.Time
	// ID is the jti claim, shown in the user's extra as credential-id.
	ID    string
	Bound *BoundObject
}

// Username is the user a ServiceAccount authenticates as.
func Username(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Groups are the groups of a ServiceAccount's user (with
// system:authenticated, which the API server adds to every user).
func Groups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}
}

// SplitUsername returns the namespace and name of a ServiceAccount user
// name, and false for any other name.
func SplitUsername(username string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(username, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	namespace, name, found = strings.Cut(rest, ":")
	if !found || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// Signer signs and verifies tokens.
type Signer struct {
	key       *ecdsa.PrivateKey
	keyID     string
	signer    jose.Signer
	issuer    string
	audiences []string
	now       func() time.Time
}

// NewSigner returns a Signer with key. issuer is the iss claim
// (DefaultIssuer if ""); apiAudiences are the audiences the API accepts and
// that a token gets when its request names none ([issuer] if empty).
func NewSigner(key *ecdsa.PrivateKey, issuer string, apiAudiences []string) (*Signer, error) {
	if key == nil {
		return nil, errors.New("service account signer: no key")
	}
	if issuer == "" {
		issuer = DefaultIssuer
	}
	if len(apiAudiences) == 0 {
		apiAudiences = []string{issuer}
	}
	kid, err := keyID(key)
	if err != nil {
		return nil, err
	}
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return nil, fmt.Errorf("service account signer: %w", err)
	}
	return &Signer{key: key, keyID: kid, signer: js, issuer: issuer, audiences: slices.Clone(apiAudiences), now: time.Now}, nil
}

// keyID is kube-apiserver's kid: the unpadded base64url SHA-256 of the
// public key's DER encoding.
func keyID(key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", fmt.Errorf("service account key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// APIAudiences are the audiences the API accepts.
func (s *Signer) APIAudiences() []string { return slices.Clone(s.audiences) }

// Issuer is the iss claim of every token.
func (s *Signer) Issuer() string { return s.issuer }

// wire forms of the claims.
type (
	ref struct {
		Name string `json:"name,omitempty"`
		UID  string `json:"uid,omitempty"`
	}
	kubernetesClaims struct {
		Namespace      string `json:"namespace,omitempty"`
		ServiceAccount *ref   `json:"serviceaccount,omitempty"`
		Pod            *ref   `json:"pod,omitempty"`
		Secret         *ref   `json:"secret,omitempty"`
	}
	privateClaims struct {
		Kubernetes *kubernetesClaims `json:"kubernetes.io,omitempty"`
	}
)

// Sign issues a token with c's claims. c.IssuedAt defaults to now and
// c.ID to a new UUID; c.Expiry must be after c.IssuedAt.
func (s *Signer) Sign(c Claims) (string, error) {
	if c.Namespace == "" || c.ServiceAccount == "" || c.ServiceAccountUID == "" {
		return "", errors.New("sign: namespace, service account and its uid are required")
	}
	if len(c.Audiences) == 0 {
		return "", errors.New("sign: no audience")
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = s.now()
	}
	if !c.Expiry.After(c.IssuedAt) {
		return "", errors.New("sign: expiry is not after issue")
	}
	if c.ID == "" {
		c.ID = string(uuid.NewUUID())
	}
	public := jwt.Claims{
		Issuer:    s.issuer,
		Subject:   Username(c.Namespace, c.ServiceAccount),
		Audience:  jwt.Audience(c.Audiences),
		Expiry:    jwt.NewNumericDate(c.Expiry),
		NotBefore: jwt.NewNumericDate(c.IssuedAt),
		IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
		ID:        c.ID,
	}
	k := &kubernetesClaims{Namespace: c.Namespace, ServiceAccount: &ref{Name: c.ServiceAccount, UID: c.ServiceAccountUID}}
	if b := c.Bound; b != nil {
		switch b.Kind {
		case "Pod":
			k.Pod = &ref{Name: b.Name, UID: b.UID}
		case "Secret":
			k.Secret = &ref{Name: b.Name, UID: b.UID}
		default:
			return "", fmt.Errorf("sign: cannot bind a token to a %s", b.Kind)
		}
	}
	out, err := jwt.Signed(s.signer).Claims(public).Claims(privateClaims{Kubernetes: k}).CompactSerialize()
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	if len(out) > MaxTokenBytes {
		return "", fmt.Errorf("%w: the token would be %d bytes, more than %d", ErrTooLarge, len(out), MaxTokenBytes)
	}
	return out, nil
}

// LooksLikeJWT reports whether token has the shape of a compact JWS (three
// base64url parts), so that other bearer tokens are not parsed as one.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2 && !strings.ContainsAny(token, " {")
}

// Verify checks a token's signature (this Signer's key, ES256 only), issuer,
// time window and audience (one of audiences; nil: the API audiences), and
// returns its claims. It does not know whether the ServiceAccount still
// exists: see Authenticator.
func (s *Signer) Verify(token string, audiences []string) (*Claims, error) {
	invalid := func(format string, args ...interface{}) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if len(token) > MaxTokenBytes {
		return nil, invalid("longer than %d bytes", MaxTokenBytes)
	}
	if !LooksLikeJWT(token) {
		return nil, invalid("not a compact JWT")
	}
	tok, err := jwt.ParseSigned(token)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(tok.Headers) != 1 || tok.Headers[0].Algorithm != string(jose.ES256) {
		return nil, invalid("unexpected signing algorithm")
	}
	var (
		public  jwt.Claims
		private privateClaims
	)
	if err := tok.Claims(&s.key.PublicKey, &public, &private); err != nil {
		return nil, invalid("the signature does not verify with this server's key (%v)", err)
	}
	if err := public.ValidateWithLeeway(jwt.Expected{Issuer: s.issuer, Time: s.now()}, leeway); err != nil {
		return nil, invalid("%v", err)
	}
	if public.Expiry == nil {
		return nil, invalid("no expiry")
	}
	if audiences == nil {
		audiences = s.audiences
	}
	if !slices.ContainsFunc(audiences, public.Audience.Contains) {
		return nil, invalid("not for this audience")
	}
	k := private.Kubernetes
	if k == nil || k.Namespace == "" || k.ServiceAccount == nil || k.ServiceAccount.Name == "" || k.ServiceAccount.UID == "" {
		return nil, invalid("no service account claims")
	}
	if public.Subject != Username(k.Namespace, k.ServiceAccount.Name) {
		return nil, invalid("subject does not match the service account")
	}
	c := &Claims{
		Namespace: k.Namespace, ServiceAccount: k.ServiceAccount.Name, ServiceAccountUID: k.ServiceAccount.UID,
		Audiences: []string(public.Audience), Expiry: public.Expiry.Time(), ID: public.ID,
	}
	if public.IssuedAt != nil {
		c.IssuedAt = public.IssuedAt.Time()
	}
	switch {
	case k.Pod != nil && k.Secret != nil:
		return nil, invalid("bound to two objects")
	case k.Pod != nil:
		c.Bound = &BoundObject{Kind: "Pod", Name: k.Pod.Name, UID: k.Pod.UID}
	case k.Secret != nil:
		c.Bound = &BoundObject{Kind: "Secret", Name: k.Secret.Name, UID: k.Secret.UID}
	}
	return c, nil
}

// TokenIssuer issues ServiceAccount tokens for knbox's own components: the
// runtime calls it to fill projected serviceAccountToken volumes, as the
// kubelet calls TokenRequest. The API server implements it.
type TokenIssuer interface {
	// Issue returns a token for the ServiceAccount namespace/serviceAccount
	// (which must exist) with these audiences (none: the API audiences),
	// valid for expirationSeconds (0: DefaultExpirationSeconds; less than
	// MinExpirationSeconds is an error; more than the configured maximum is
	// capped), optionally bound to an object, and its expiry.
	Issue(ctx context.Context, namespace, serviceAccount string, audiences []string, expirationSeconds int64, bound *BoundObject) (token string, expiry time.Time, err error)
}

// RefreshAt is when a holder of a token issued at issuedAt and expiring at
// expiry should get a new one: after 80% of its lifetime or 24 hours,
// whichever comes first, as the kubelet refreshes projected tokens.
func RefreshAt(issuedAt, expiry time.Time) time.Time {
	at := issuedAt.Add(expiry.Sub(issuedAt) * 8 / 10)
	if day := issuedAt.Add(24 * time.Hour); day.Before(at) {
		return day
	}
	return at
}
