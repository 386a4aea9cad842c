package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from what Build returns")

// goldenCase is a testdata/golden/*.yaml file: a Revision as a user writes
// it, and the config of its image.
type goldenCase struct {
	Image    ImageConfig         `json:"image"`
	Revision *servingv1.Revision `json:"revision"`
	Policy   struct {
		RefuseRoot bool `json:"refuseRoot"`
	} `json:"policy"`
}

// TestGolden converts each Revision in testdata/golden (defaulted with
// Knative's own SetDefaults) to config.json and compares it with the .json
// next to it. `go test ./pkg/oci -run TestGolden -update` rewrites them.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	realTestdata, err := filepath.EvalSymlinks(testdata)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var gc goldenCase
			if err := yaml.UnmarshalStrict(b, &gc); err != nil {
				t.Fatal(err)
			}
			rev := gc.Revision
			rev.SetDefaults(context.Background())
			in, err := goldenInput(rev, gc.Image, testdata)
			if err != nil {
				t.Fatal(err)
			}
			in.Policy.RefuseRoot = gc.Policy.RefuseRoot
			spec, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got, err := json.MarshalIndent(spec, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			// Paths of this checkout become /testdata.
			got = bytes.ReplaceAll(got, []byte(realTestdata), []byte("/testdata"))
			got = bytes.ReplaceAll(got, []byte(testdata), []byte("/testdata"))

			golden := strings.TrimSuffix(file, ".yaml") + ".json"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from what Build returns (run with -update to accept):\n%s", golden, lineDiff(string(want), string(got)))
			}
		})
	}
}

// goldenInput does what the runtime will do for the first instance of rev:
// the environment the contract asks for, volumes prepared under
// testdata/volumes, host files at fixed places.
func goldenInput(rev *servingv1.Revision, img ImageConfig, testdata string) (Input, error) {
	c := rev.Spec.Containers[0]
	port := int32(8080)
	if len(c.Ports) > 0 && c.Ports[0].ContainerPort != 0 {
		port = c.Ports[0].ContainerPort
	}
	env := []string{
		"PORT=" + strconv.Itoa(int(port)),
		"K_SERVICE=" + rev.Labels["serving.knative.dev/service"],
		"K_CONFIGURATION=" + rev.Labels["serving.knative.dev/configuration"],
		"K_REVISION=" + rev.Name,
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return Input{}, fmt.Errorf("env %s: valueFrom is resolved by the caller, not in golden cases", e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	vols := map[string]Volume{}
	for _, v := range rev.Spec.Volumes {
		vols[v.Name] = Volume{Path: filepath.Join(testdata, "volumes", v.Name), Writable: v.EmptyDir != nil}
	}
	id := rev.Name + "-1"
	inst := "/var/lib/knbox/instances/" + id
	var pod *corev1.PodSecurityContext
	if rev.Spec.SecurityContext != nil {
		pod = rev.Spec.SecurityContext
	}
	return Input{
		Container:      c,
		PodSecurity:    pod,
		Image:          img,
		Env:            env,
		Rootfs:         filepath.Join(testdata, "rootfs"),
		Hostname:       id,
		NetNSPath:      "/run/knbox/netns/" + id,
		CgroupsPath:    "/knbox/" + rev.Namespace + "/" + id,
		EtcHosts:       inst + "/hosts",
		EtcHostname:    inst + "/hostname",
		ResolvConf:     inst + "/resolv.conf",
		TerminationLog: inst + "/termination-log",
		SyslogSocket:   inst + "/log.sock",
		Volumes:        vols,
		MachineMemory:  8 << 30,
	}, nil
}

// lineDiff shows the lines of got that differ from want, with line numbers.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 40; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n-%s\n+%s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
