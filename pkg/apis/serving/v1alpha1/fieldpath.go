package v1alpha1

import (
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// FieldPathFromV1 rewrites a v1 field path (as in apis.FieldError paths) of
// the v1 form of obj into the path of the same field in obj, a v1alpha1
// *Service, *Configuration, *Revision or *Route. For a runLatest Service,
// "spec.template.spec.containers[0].image" becomes
// "spec.runLatest.configuration.revisionTemplate.spec.container.image"; for
// a Route, "spec.traffic[1].tag" becomes "spec.traffic[1].name". A path with
// no counterpart in obj is returned unchanged.
func FieldPathFromV1(obj runtime.Object, path string) string {
	switch o := obj.(type) {
	case *Service:
		return servicePathFromV1(o, path)
	case *Configuration:
		if p, ok := templatePathFromV1(path, "spec.revisionTemplate"); ok {
			return p
		}
	case *Revision:
		if p, ok := containerPathFromV1(path, "spec", "spec"); ok {
			return p
		}
	case *Route:
		return tagPathFromV1(path)
	}
	return path
}

// under reports whether path is prefix or below it, and what follows prefix
// ("", ".field..." or "[index]...").
func under(path, prefix string) (rest string, ok bool) {
	if !strings.HasPrefix(path, prefix) {
		return "", false
	}
	rest = path[len(prefix):]
	if rest == "" || rest[0] == '.' || rest[0] == '[' {
		return rest, true
	}
	return "", false
}

// containerPathFromV1 rewrites from+".containers[0]..." to to+".container...".
func containerPathFromV1(path, from, to string) (string, bool) {
	if rest, ok := under(path, from+".containers[0]"); ok {
		return to + ".container" + rest, true
	}
	if path == from+".containers" {
		return to + ".container", true
	}
	return path, false
}

// templatePathFromV1 rewrites a path below a v1 spec.template to the same
// field below the v1alpha1 revisionTemplate at to.
func templatePathFromV1(path, to string) (string, bool) {
	rest, ok := under(path, "spec.template")
	if !ok {
		return path, false
	}
	if p, ok := containerPathFromV1(rest, ".spec", to+".spec"); ok {
		return p, true
	}
	if _, ok := under(rest, ".spec.containers"); ok {
		return path, true // a second container has no counterpart
	}
	return to + rest, true
}

var (
	tagPath     = regexp.MustCompile(`^((?:spec|status)\.traffic\[\d+\])\.tag$`)
	trafficPath = regexp.MustCompile(`^spec\.traffic(?:\[(\d+)\](.*))?$`)
)

func tagPathFromV1(path string) string {
	return tagPath.ReplaceAllString(path, "${1}.name")
}

func servicePathFromV1(s *Service, path string) string {
	var mode string
	switch {
	case s.Spec.RunLatest != nil:
		mode = "spec.runLatest"
	case s.Spec.Pinned != nil:
		mode = "spec.pinned"
	case s.Spec.Release != nil:
		mode = "spec.release"
	default:
		// Manual: the v1 spec is not the Service's; it belongs to the
		// Route and the Configuration.
		return tagPathFromV1(path)
	}
	if p, ok := templatePathFromV1(path, mode+".configuration.revisionTemplate"); ok {
		return p
	}
	m := trafficPath.FindStringSubmatch(path)
	if m == nil {
		return tagPathFromV1(path)
	}
	// The traffic is made from the mode: its errors are the mode's.
	index, field := m[1], m[2]
	switch mode {
	case "spec.pinned":
		if index == "0" && field == ".revisionName" {
			return "spec.pinned.revisionName"
		}
	case "spec.release":
		i, err := strconv.Atoi(index)
		switch {
		case err != nil:
		case field == ".percent":
			if len(s.Spec.Release.Revisions) == 2 && i < 2 {
				return "spec.release.rolloutPercent"
			}
		case field == ".revisionName" || field == ".latestRevision":
			if i < len(s.Spec.Release.Revisions) {
				return "spec.release.revisions[" + index + "]"
			}
		}
	}
	return mode
}
