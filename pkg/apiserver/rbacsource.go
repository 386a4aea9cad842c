package apiserver

import (
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/store"
)

// maxDecoded bounds the cache of decoded RBAC objects; past it the cache
// starts over.
const maxDecoded = 10000

// rbacSource reads roles and bindings from the store for the authorizer, on
// every request: the store is the one truth, so a binding takes effect with
// the write that creates it and a deleted one is gone at once. Decoding is
// what would cost, so decoded objects are kept by key and revision; a
// returned object is shared and must not be changed.
type rbacSource struct {
	st                                      *store.Store
	roles, clusterRoles, rbs, crbs, sas, ns *Kind

	mu      sync.Mutex
	decoded map[store.Key]decodedEntry
}

type decodedEntry struct {
	rev int64
	obj runtime.Object
}

func newRBACSource(st *store.Store, ks *Kinds) *rbacSource {
	return &rbacSource{
		st:           st,
		roles:        ks.Lookup(rbacv1.GroupName, "roles"),
		clusterRoles: ks.Lookup(rbacv1.GroupName, "clusterroles"),
		rbs:          ks.Lookup(rbacv1.GroupName, "rolebindings"),
		crbs:         ks.Lookup(rbacv1.GroupName, "clusterrolebindings"),
		sas:          ks.Lookup("", "serviceaccounts"),
		ns:           ks.Lookup("", "namespaces"),
		decoded:      map[store.Key]decodedEntry{},
	}
}

func (c *rbacSource) decode(k *Kind, e store.Entry) (runtime.Object, error) {
	c.mu.Lock()
	d, ok := c.decoded[e.Key]
	c.mu.Unlock()
	if ok && d.rev == e.Revision {
		return d.obj, nil
	}
	obj, err := decodeStored(k, e.Value)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.decoded) >= maxDecoded {
		c.decoded = map[store.Key]decodedEntry{}
	}
	c.decoded[e.Key] = decodedEntry{rev: e.Revision, obj: obj}
	c.mu.Unlock()
	return obj, nil
}

func (c *rbacSource) get(k *Kind, namespace, name string) (runtime.Object, error) {
	e, err := c.st.Get(store.Key{Resource: k.storeResource(), Namespace: namespace, Name: name})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(k.GroupResource(), name)
	}
	if err != nil {
		return nil, err
	}
	return c.decode(k, e)
}

func (c *rbacSource) list(k *Kind, namespace string) ([]runtime.Object, error) {
	entries, _, err := c.st.List(k.storeResource(), namespace)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(entries))
	for _, e := range entries {
		obj, err := c.decode(k, e)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

func (c *rbacSource) GetRole(namespace, name string) (*rbacv1.Role, error) {
	o, err := c.get(c.roles, namespace, name)
	if err != nil {
		return nil, err
	}
	return o.(*rbacv1.Role), nil
}

func (c *rbacSource) GetClusterRole(name string) (*rbacv1.ClusterRole, error) {
	o, err := c.get(c.clusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return o.(*rbacv1.ClusterRole), nil
}

func (c *rbacSource) ListRoleBindings(namespace string) ([]*rbacv1.RoleBinding, error) {
	objs, err := c.list(c.rbs, namespace)
	out := make([]*rbacv1.RoleBinding, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*rbacv1.RoleBinding))
	}
	return out, err
}

func (c *rbacSource) ListClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error) {
	objs, err := c.list(c.crbs, "")
	out := make([]*rbacv1.ClusterRoleBinding, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*rbacv1.ClusterRoleBinding))
	}
	return out, err
}

func (c *rbacSource) listClusterRoles() ([]*rbacv1.ClusterRole, error) {
	objs, err := c.list(c.clusterRoles, "")
	out := make([]*rbacv1.ClusterRole, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*rbacv1.ClusterRole))
	}
	return out, err
}

// serviceAccount reads a ServiceAccount (for token checks and admission).
func (c *rbacSource) serviceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	o, err := c.get(c.sas, namespace, name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.ServiceAccount), nil
}

var _ authz.Source = (*rbacSource)(nil)
