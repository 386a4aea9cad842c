package pod

import (
	"net"
	"os"
	"strings"
)

// Where resolvConf looks for the host's name servers: the system's file,
// then systemd-resolved's list of its upstream servers, for hosts whose
// /etc/resolv.conf names only resolved's stub on loopback.
var resolvConfFiles = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// resolvConf is a pod's /etc/resolv.conf: nameservers if given, else the
// host's name servers that are not on the host's loopback (which a pod
// cannot reach from its namespace); and the host's search domains and
// options.
func resolvConf(nameservers []string) string {
	const none = "# knbox: no name server of the host is reachable from the instance's network namespace\n"
	var search, servers []string
	for i, file := range resolvConfFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "nameserver":
				if ip := net.ParseIP(f[1]); ip != nil && !ip.IsLoopback() {
					servers = append(servers, strings.Join(f, " "))
				}
			case "search", "options":
				if i == 0 {
					search = append(search, strings.Join(f, " "))
				}
			}
		}
		if len(servers) > 0 {
			break
		}
	}
	if len(nameservers) > 0 {
		servers = servers[:0]
		for _, ns := range nameservers {
			servers = append(servers, "nameserver "+ns)
		}
	}
	if len(servers) == 0 {
		return none
	}
	return strings.Join(append(servers, search...), "\n") + "\n"
}
