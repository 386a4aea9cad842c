package apiserver

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/authz"
)

// What the server keeps in order besides the garbage collector, each a
// level-triggered pass over the store: ClusterRoles with an aggregationRule
// get the rules of the roles they select (kube-controller-manager's
// clusterrole-aggregation controller), and every active namespace has a
// ServiceAccount "default" (its serviceaccount controller) and, with
// Options.RootCA, a ConfigMap kube-root-ca.crt (its root-ca-cert-publisher).
const (
	aggregateKey       = "aggregate"
	serviceAccountsKey = "serviceaccounts"
	rootCAKey          = "rootca"
	// maxAggregationPasses bounds the passes of one aggregation run:
	// aggregated roles that select aggregated roles (admin selects edit,
	// which selects view) settle in as many passes as the chain is long.
	maxAggregationPasses = 10
)

// systemUser is the identity of the server's own writes.
var systemUser = admission.User{Name: "system:knbox"}

// ensurePolicy creates or completes the default roles and bindings
// (authz.ClusterRoles, authz.ClusterRoleBindings) as kube-apiserver does at
// every start: missing ones are created; missing rules, labels,
// annotations and subjects are added; nothing is taken away; one annotated
// rbac.authorization.kubernetes.io/autoupdate: "false" is left alone.
func (s *Server) ensurePolicy(ctx context.Context) error {
	for _, r := range authz.ClusterRoles() {
		r := r
		opts := reconciliation.ReconcileRoleOptions{Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: &r},
			Client: clusterRoleModifier{s: s, ctx: ctx}, Confirm: true}
		if _, err := opts.Run(); err != nil {
			return fmt.Errorf("default clusterrole %s: %w", r.Name, err)
		}
	}
	for _, b := range authz.ClusterRoleBindings() {
		b := b
		opts := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
			Client: clusterRoleBindingModifier{s: s, ctx: ctx}, Confirm: true}
		if _, err := opts.Run(); err != nil {
			return fmt.Errorf("default clusterrolebinding %s: %w", b.Name, err)
		}
	}
	return nil
}

// systemUpdate replaces a stored object with obj as the server.
func (s *Server) systemUpdate(ctx context.Context, k *Kind, obj runtime.Object) (runtime.Object, error) {
	m := accessor(obj)
	cur, entry, err := s.getStored(k, m.Namespace, m.Name)
	if err != nil {
		return nil, err
	}
	if m.ResourceVersion != "" && m.ResourceVersion != accessor(cur).ResourceVersion {
		return nil, conflict(k, m.Name)
	}
	out, _, err := s.update(ctx, request{kind: k, version: k.Version, namespace: m.Namespace, name: m.Name}, obj, cur, entry, nil, false, owner{manager: internalManager})
	return out, err
}

type clusterRoleModifier struct {
	s   *Server
	ctx context.Context
}

func (c clusterRoleModifier) kind() *Kind { return c.s.rbac.clusterRoles }

func (c clusterRoleModifier) Get(_, name string) (reconciliation.RuleOwner, error) {
	o, _, err := c.s.getStored(c.kind(), "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

func (c clusterRoleModifier) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	o, err := c.s.createObject(c.ctx, c.kind(), in.GetObject().DeepCopyObject(), systemUser)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

func (c clusterRoleModifier) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	o, err := c.s.systemUpdate(c.ctx, c.kind(), in.GetObject().DeepCopyObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: o.(*rbacv1.ClusterRole)}, nil
}

type clusterRoleBindingModifier struct {
	s   *Server
	ctx context.Context
}

func (c clusterRoleBindingModifier) kind() *Kind { return c.s.rbac.crbs }

func (c clusterRoleBindingModifier) Get(_, name string) (reconciliation.RoleBinding, error) {
	o, _, err := c.s.getStored(c.kind(), "", name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindingModifier) Delete(_, name string, uid types.UID) error {
	_, err := c.s.deleteObject(c.ctx, c.kind(), "", name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	return err
}

func (c clusterRoleBindingModifier) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	o, err := c.s.createObject(c.ctx, c.kind(), in.GetObject().DeepCopyObject(), systemUser)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

func (c clusterRoleBindingModifier) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	o, err := c.s.systemUpdate(c.ctx, c.kind(), in.GetObject().DeepCopyObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o.(*rbacv1.ClusterRoleBinding)}, nil
}

// aggregate writes into every ClusterRole with an aggregationRule the rules
// of the ClusterRoles it selects, pass after pass until nothing changes.
func (s *Server) aggregate(ctx context.Context) error {
	for pass := 0; pass < maxAggregationPasses; pass++ {
		roles, err := s.rbac.listClusterRoles()
		if err != nil {
			return err
		}
		changed := false
		for _, r := range roles {
			if r.AggregationRule == nil {
				continue
			}
			rules, err := authz.Aggregate(r, roles)
			if err != nil {
				s.log.Warn("clusterrole aggregation", "clusterrole", r.Name, "err", err)
				continue
			}
			if authz.SameRules(rules, r.Rules) {
				continue
			}
			c := r.DeepCopy()
			c.Rules = rules
			// A conflict means someone else (a user, or the aggregation of
			// another server sharing the store) wrote the role since the
			// list: the next pass lists again and recomputes.
			if _, err := s.systemUpdate(ctx, s.rbac.clusterRoles, c); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("aggregate clusterrole %s: %w", r.Name, err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("clusterrole aggregation did not settle in %d passes (aggregation rules that select each other?)", maxAggregationPasses)
}

// ensureServiceAccounts creates the ServiceAccount "default" in every
// namespace that is not terminating and lacks it.
func (s *Server) ensureServiceAccounts(ctx context.Context) error {
	objs, err := s.rbac.list(s.rbac.ns, "")
	if err != nil {
		return err
	}
	for _, o := range objs {
		ns := o.(*corev1.Namespace)
		if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		if _, err := s.rbac.serviceAccount(ns.Name, "default"); !apierrors.IsNotFound(err) {
			if err != nil {
				return err
			}
			continue
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
		_, err := s.createObject(ctx, s.rbac.sas, sa, systemUser)
		if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("create serviceaccount %s/default: %w", ns.Name, err)
		}
	}
	return nil
}

// runAuthControllers runs aggregation and the default ServiceAccounts until
// ctx ends, triggered by changes of ClusterRoles, Namespaces and
// ServiceAccounts.
func (s *Server) runAuthControllers(ctx context.Context) {
	q := workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), "auth")
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	go s.triggerOn(ctx, q, s.rbac.clusterRoles, aggregateKey)
	go s.triggerOn(ctx, q, s.rbac.ns, serviceAccountsKey)
	go s.triggerOn(ctx, q, s.rbac.sas, serviceAccountsKey)
	if cms := s.kinds.Lookup("", "configmaps"); cms != nil && len(s.opts.RootCA) > 0 {
		go s.triggerOn(ctx, q, s.rbac.ns, rootCAKey)
		go s.triggerOn(ctx, q, cms, rootCAKey)
	}
	for {
		item, shutdown := q.Get()
		if shutdown {
			return
		}
		var err error
		switch item {
		case aggregateKey:
			err = s.aggregate(ctx)
		case serviceAccountsKey:
			err = s.ensureServiceAccounts(ctx)
		case rootCAKey:
			err = s.publishRootCA(ctx)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Error("auth controller pass failed", "pass", item, "err", err)
			q.AddRateLimited(item)
		} else {
			q.Forget(item)
		}
		q.Done(item)
	}
}

// triggerOn adds key to q whenever an object of k changes, and once each
// time it starts watching (for what changed while it was not).
func (s *Server) triggerOn(ctx context.Context, q workqueue.RateLimitingInterface, k *Kind, key string) {
	for ctx.Err() == nil {
		ch, err := s.store.Watch(ctx, k.storeResource(), "", 0, false)
		if err != nil {
			if ctx.Err() == nil { // a stopping server's closed store is no failure
				s.log.Warn("watch for the auth controllers", "resource", k.storeResource(), "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		q.Add(key)
		for range ch {
			q.Add(key)
		}
	}
}

// RootCAConfigMap is the ConfigMap in every namespace that holds the CA
// bundle (key RootCAKey) clients inside instances verify the API with, as
// on a cluster; the kubelet's automounted ServiceAccount volume reads it.
const (
	RootCAConfigMap = "kube-root-ca.crt"
	RootCAKey       = "ca.crt"
	// rootCADescription is the annotation Kubernetes puts on it.
	rootCADescription = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints " +
		"such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
)

// publishRootCA makes the ConfigMap kube-root-ca.crt in every namespace
// that is not terminating hold Options.RootCA, creating it or putting its
// data back when a user changed it, as the root-ca-cert-publisher does.
func (s *Server) publishRootCA(ctx context.Context) error {
	k := s.kinds.Lookup("", "configmaps")
	if k == nil || len(s.opts.RootCA) == 0 {
		return nil
	}
	objs, err := s.rbac.list(s.rbac.ns, "")
	if err != nil {
		return err
	}
	want := map[string]string{RootCAKey: string(s.opts.RootCA)}
	for _, o := range objs {
		ns := o.(*corev1.Namespace)
		if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		cur, _, err := s.getStored(k, ns.Name, RootCAConfigMap)
		switch {
		case apierrors.IsNotFound(err):
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: RootCAConfigMap,
				Annotations: map[string]string{"kubernetes.io/description": rootCADescription}}, Data: want}
			_, err = s.createObject(ctx, k, cm, systemUser)
		case err == nil:
			cm := cur.(*corev1.ConfigMap)
			if maps.Equal(cm.Data, want) && len(cm.BinaryData) == 0 {
				continue
			}
			cm = cm.DeepCopy()
			cm.Data, cm.BinaryData = want, nil
			_, err = s.systemUpdate(ctx, k, cm)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("configmap %s/%s: %w", ns.Name, RootCAConfigMap, err)
		}
	}
	return nil
}
