package daemon

import (
	"net"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The Service that describes knbox's ingress on the API (read-only), as a
// cluster's Knative ingress is a Service of type LoadBalancer: port 80 (and
// 443 with an HTTPS listener) forwards to the listener's port, given as the
// nodePort too (the port a client dials on the host), and the load
// balancer's address is the listener's. Knative's test framework finds it
// with GATEWAY_NAMESPACE_OVERRIDE=knative-serving
// GATEWAY_OVERRIDE=knbox-ingress.
const (
	IngressNamespace = systemNamespace
	IngressName      = "knbox-ingress"
)

// ingressService describes the HTTP listener http and, if not nil, the
// HTTPS listener https.
func ingressService(http, https net.Addr) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: IngressNamespace, Name: IngressName,
			Labels: map[string]string{"app.kubernetes.io/name": "knbox", "app.kubernetes.io/component": "ingress"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	ips := map[string]bool{}
	add := func(name string, port int32, a net.Addr) {
		tcp, ok := a.(*net.TCPAddr)
		if !ok {
			return
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port,
			TargetPort: intstr.FromInt32(int32(tcp.Port)), NodePort: int32(tcp.Port)})
		ip := tcp.IP
		if ip == nil || ip.IsUnspecified() {
			ip = net.IPv4(127, 0, 0, 1)
		}
		if !ips[ip.String()] {
			ips[ip.String()] = true
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
		}
	}
	add("http", 80, http)
	if https != nil {
		add("https", 443, https)
	}
	return svc
}

// listenerAddr is l's address; nil when there is no listener.
func listenerAddr(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}
