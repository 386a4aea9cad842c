package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// ingressKind is the core/v1 Service kind. knbox runs no Kubernetes
// Services; it serves one, read-only, that describes its own ingress (its
// HTTP listeners), as a cluster's Knative ingress is a Service
// (kourier-system/kourier, istio-system/istio-ingressgateway): tools that
// find the ingress by its Service, Knative's test framework among them,
// find knbox's router. Options.Ingress is that Service.
func ingressKind() *Kind {
	return &Kind{
		Group: "", Version: "v1", Kind: "Service", Resource: "services", Singular: "service",
		ShortNames: []string{"svc"}, Namespaced: true, ReadOnly: true,
		New: func() runtime.Object { return &corev1.Service{} }, NewList: func() runtime.Object { return &corev1.ServiceList{} },
		Columns: cols(col("Type", "string", "The type of the service"), col("Cluster-IP", "string", "The cluster IP"),
			col("External-IP", "string", "The load balancer's addresses"), col("Port(s)", "string", "The ports")),
		Row: func(o runtime.Object) []interface{} {
			s := o.(*corev1.Service)
			clusterIP := s.Spec.ClusterIP
			if clusterIP == "" {
				clusterIP = "<none>"
			}
			var ext []string
			for _, in := range s.Status.LoadBalancer.Ingress {
				if in.IP != "" {
					ext = append(ext, in.IP)
				} else if in.Hostname != "" {
					ext = append(ext, in.Hostname)
				}
			}
			if len(ext) == 0 {
				ext = []string{"<none>"}
			}
			var ports []string
			for _, p := range s.Spec.Ports {
				port := strconv.Itoa(int(p.Port))
				if p.NodePort != 0 {
					port += ":" + strconv.Itoa(int(p.NodePort))
				}
				ports = append(ports, port+"/"+string(p.Protocol))
			}
			return []interface{}{string(s.Spec.Type), clusterIP, strings.Join(ext, ","), strings.Join(ports, ",")}
		},
	}
}

// ensureIngress stores Options.Ingress, or brings the stored one up to
// date (the listeners may have moved since the last start), with its
// namespace.
func (s *Server) ensureIngress(ctx context.Context) error {
	want := s.opts.Ingress
	if want == nil {
		return nil
	}
	want = want.DeepCopy()
	if err := s.ensureNamespace(ctx, want.Namespace); err != nil {
		return err
	}
	k := s.kinds.Lookup("", "services")
	_, err := s.createObject(ctx, k, want.DeepCopy(), systemUser)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("ingress service %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	}
	obj, _, err := s.getStored(k, want.Namespace, want.Name)
	if err != nil {
		return fmt.Errorf("ingress service %s/%s: %w", want.Namespace, want.Name, err)
	}
	cur := obj.(*corev1.Service)
	if equality.Semantic.DeepEqual(cur.Spec, want.Spec) && equality.Semantic.DeepEqual(cur.Status, want.Status) &&
		equality.Semantic.DeepEqual(cur.Labels, want.Labels) {
		return nil
	}
	next := cur.DeepCopy()
	next.Spec, next.Status, next.Labels = want.Spec, want.Status, want.Labels
	if _, err := s.systemUpdate(ctx, k, next); err != nil {
		return fmt.Errorf("ingress service %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}
