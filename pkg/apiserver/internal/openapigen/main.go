// Command openapigen writes the OpenAPI definitions knbox publishes and
// uses for server-side apply (go generate in package apiserver). It reads
// them from where the modules knbox builds with ship them, and writes no
// schema of its own:
//
//   - the built-in kinds (core, RBAC, node, authentication, authorization,
//     meta) from the OpenAPI v2 document k8s.io/cli-runtime ships
//     (artifacts/openapi/swagger.json), which Kubernetes generates from
//     k8s.io/api's types with kube-openapi;
//   - Knative's kinds from the CRD schemas knative.dev/serving ships
//     (config/core/300-resources/*.yaml), and ClusterDomainClaim's from
//     knative.dev/networking (config/domain-claim.yaml), completed as kube-apiserver
//     completes a CRD's schema (apiVersion, kind, metadata as ObjectMeta,
//     the group-version-kind extension);
//   - Build's from the CRD kept beside its type
//     (pkg/apis/build/v1alpha1/300-build.yaml).
//
// Only the definitions the served kinds reach are kept.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// roots are the built-in definitions knbox serves (its kinds, their lists,
// and the meta kinds its responses use).
var roots = []string{
	"io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.NamespaceList",
	"io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.SecretList",
	"io.k8s.api.core.v1.ConfigMap", "io.k8s.api.core.v1.ConfigMapList",
	"io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodList",
	"io.k8s.api.core.v1.Service", "io.k8s.api.core.v1.ServiceList",
	"io.k8s.api.core.v1.ServiceAccount", "io.k8s.api.core.v1.ServiceAccountList",
	"io.k8s.api.core.v1.ResourceQuota", "io.k8s.api.core.v1.ResourceQuotaList",
	"io.k8s.api.core.v1.LimitRange", "io.k8s.api.core.v1.LimitRangeList",
	"io.k8s.api.core.v1.Event", "io.k8s.api.core.v1.EventList",
	"io.k8s.api.events.v1.Event", "io.k8s.api.events.v1.EventList",
	"io.k8s.api.node.v1.RuntimeClass", "io.k8s.api.node.v1.RuntimeClassList",
	"io.k8s.api.rbac.v1.Role", "io.k8s.api.rbac.v1.RoleList",
	"io.k8s.api.rbac.v1.ClusterRole", "io.k8s.api.rbac.v1.ClusterRoleList",
	"io.k8s.api.rbac.v1.RoleBinding", "io.k8s.api.rbac.v1.RoleBindingList",
	"io.k8s.api.rbac.v1.ClusterRoleBinding", "io.k8s.api.rbac.v1.ClusterRoleBindingList",
	"io.k8s.api.authentication.v1.TokenRequest",
	"io.k8s.api.authorization.v1.SubjectAccessReview",
	"io.k8s.api.authorization.v1.SelfSubjectAccessReview",
	"io.k8s.api.authorization.v1.LocalSubjectAccessReview",
	"io.k8s.api.authorization.v1.SelfSubjectRulesReview",
	"io.k8s.apimachinery.pkg.apis.meta.v1.Status",
	"io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
	"io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
}

// servedKnative are the Knative kinds knbox serves.
var servedKnative = map[string]bool{
	"serving.knative.dev/Service": true, "serving.knative.dev/Configuration": true,
	"serving.knative.dev/Revision": true, "serving.knative.dev/Route": true,
	"serving.knative.dev/DomainMapping": true, "networking.internal.knative.dev/ClusterDomainClaim": true,
	"build.knative.dev/Build": true,
}

// buildCRD is the schema of the seed era's Build, which no module knbox
// builds with ships (knative/build was retired): knbox keeps it beside
// the type, as the CRD the kind would have on a cluster.
const buildCRD = "../apis/build/v1alpha1/300-build.yaml"

const objectMeta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

func main() {
	out := flag.String("o", "openapi_definitions.json", "output file")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}

func moduleDir(path string) (string, error) {
	b, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("locate module %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func run(out string) error {
	cliRuntime, err := moduleDir("k8s.io/cli-runtime")
	if err != nil {
		return err
	}
	serving, err := moduleDir("knative.dev/serving")
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(cliRuntime, "artifacts", "openapi", "swagger.json"))
	if err != nil {
		return err
	}
	var swagger struct {
		Definitions map[string]map[string]interface{} `json:"definitions"`
	}
	if err := json.Unmarshal(b, &swagger); err != nil {
		return fmt.Errorf("decode swagger.json: %w", err)
	}
	defs := map[string]map[string]interface{}{}
	var walk func(name string) error
	walk = func(name string) error {
		if _, ok := defs[name]; ok {
			return nil
		}
		d, ok := swagger.Definitions[name]
		if !ok {
			return fmt.Errorf("definition %s not in swagger.json", name)
		}
		defs[name] = d
		for _, r := range refs(d) {
			if err := walk(r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range append(roots, objectMeta) {
		if err := walk(r); err != nil {
			return err
		}
	}
	files, err := filepath.Glob(filepath.Join(serving, "config", "core", "300-resources", "*.yaml"))
	if err != nil {
		return err
	}
	// ClusterDomainClaim's CRD ships with knative.dev/networking.
	networking, err := moduleDir("knative.dev/networking")
	if err != nil {
		return err
	}
	files = append(files, filepath.Join(networking, "config", "domain-claim.yaml"), buildCRD)
	sort.Strings(files)
	for _, f := range files {
		if err := addCRD(defs, swagger.Definitions, f); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(defs); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// refs lists the definitions a schema refers to.
func refs(v interface{}) []string {
	var out []string
	switch t := v.(type) {
	case map[string]interface{}:
		for k, c := range t {
			if s, ok := c.(string); ok && k == "$ref" {
				out = append(out, strings.TrimPrefix(s, "#/definitions/"))
				continue
			}
			out = append(out, refs(c)...)
		}
	case []interface{}:
		for _, c := range t {
			out = append(out, refs(c)...)
		}
	}
	return out
}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema struct {
				OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// addCRD adds the served versions of a CRD's kind, named as kube-apiserver
// names a custom resource's definition (reversed group, version, kind).
func addCRD(defs, builtin map[string]map[string]interface{}, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var c crd
	if err := yaml.Unmarshal(b, &c); err != nil {
		return err
	}
	if !servedKnative[c.Spec.Group+"/"+c.Spec.Names.Kind] {
		return nil // a kind knbox does not serve (DomainMapping, the autoscaler's)
	}
	parts := strings.Split(c.Spec.Group, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	rev := strings.Join(parts, ".")
	for _, v := range c.Spec.Versions {
		s := v.Schema.OpenAPIV3Schema
		if !v.Served || s == nil {
			continue
		}
		props, _ := s["properties"].(map[string]interface{})
		if props == nil {
			props = map[string]interface{}{}
			s["properties"] = props
		}
		// As kube-apiserver does for a CRD: apiVersion and kind with the
		// built-in descriptions, metadata as ObjectMeta.
		meta := builtin["io.k8s.api.core.v1.ConfigMap"]["properties"].(map[string]interface{})
		props["apiVersion"] = meta["apiVersion"]
		props["kind"] = meta["kind"]
		props["metadata"] = map[string]interface{}{
			"$ref":        "#/definitions/" + objectMeta,
			"description": meta["metadata"].(map[string]interface{})["description"],
		}
		s["x-kubernetes-group-version-kind"] = []interface{}{map[string]interface{}{
			"group": c.Spec.Group, "version": v.Name, "kind": c.Spec.Names.Kind,
		}}
		defs[rev+"."+v.Name+"."+c.Spec.Names.Kind] = s
	}
	return nil
}
