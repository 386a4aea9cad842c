package daemon

import (
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIngressService(t *testing.T) {
	for _, c := range []struct {
		name        string
		http, https net.Addr
		ports       map[int32]int32 // port -> nodePort
		ip          string
	}{
		{"loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, nil, map[int32]int32{80: 8080}, "127.0.0.1"},
		{"every address is reached on loopback", &net.TCPAddr{Port: 8080}, nil, map[int32]int32{80: 8080}, "127.0.0.1"},
		{"with https", &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 80}, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8443},
			map[int32]int32{80: 80, 443: 8443}, "192.0.2.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ingressService(c.http, c.https)
			if s.Namespace != IngressNamespace || s.Name != IngressName || s.Spec.Type != corev1.ServiceTypeLoadBalancer {
				t.Errorf("%s/%s type %s", s.Namespace, s.Name, s.Spec.Type)
			}
			got := map[int32]int32{}
			for _, p := range s.Spec.Ports {
				got[p.Port] = p.NodePort
				if p.TargetPort.IntVal != p.NodePort {
					t.Errorf("port %d: targetPort %s, nodePort %d", p.Port, p.TargetPort.String(), p.NodePort)
				}
			}
			if len(got) != len(c.ports) {
				t.Errorf("ports %v, want %v", got, c.ports)
			}
			for p, np := range c.ports {
				if got[p] != np {
					t.Errorf("ports %v, want %v", got, c.ports)
				}
			}
			// Knative's test framework wants exactly one address.
			if in := s.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != c.ip {
				t.Errorf("load balancer %v, want one address %s", in, c.ip)
			}
		})
	}
}
