package v1alpha1

import (
	"context"
	"fmt"

	"knative.dev/pkg/apis"
)

// The Validate methods check what only the seed API's shape can get wrong,
// with v1alpha1 field paths. Everything else is checked by Knative's own v1
// Validate on the converted object (see FieldPathFromV1 to report its
// errors in v1alpha1 terms).

// Validate checks the shape of a Service: exactly one mode and what that
// mode needs.
func (s *Service) Validate(ctx context.Context) *apis.FieldError {
	var set []string
	spec := &s.Spec
	if spec.RunLatest != nil {
		set = append(set, "spec.runLatest")
	}
	if spec.Pinned != nil {
		set = append(set, "spec.pinned")
	}
	if spec.Release != nil {
		set = append(set, "spec.release")
	}
	if spec.Manual != nil {
		set = append(set, "spec.manual")
	}
	switch len(set) {
	case 0:
		return apis.ErrMissingOneOf("spec.runLatest", "spec.pinned", "spec.release", "spec.manual")
	case 1:
	default:
		return apis.ErrMultipleOneOf(set...)
	}

	var errs *apis.FieldError
	switch {
	case spec.RunLatest != nil:
		errs = spec.RunLatest.Configuration.validate(ctx).ViaField("spec.runLatest.configuration")
	case spec.Pinned != nil:
		switch spec.Pinned.RevisionName {
		case "":
			errs = apis.ErrMissingField("spec.pinned.revisionName")
		case LatestRevisionName:
			errs = apis.ErrInvalidValue(LatestRevisionName, "spec.pinned.revisionName",
				"only release knows @latest; use runLatest")
		}
		errs = errs.Also(spec.Pinned.Configuration.validate(ctx).ViaField("spec.pinned.configuration"))
	case spec.Release != nil:
		errs = spec.Release.validate().ViaField("spec.release")
		errs = errs.Also(spec.Release.Configuration.validate(ctx).ViaField("spec.release.configuration"))
	case spec.Manual != nil:
		if raw, ok := s.Annotations[V1TrafficAnnotation]; ok {
			_, errs = parseV1Traffic(raw)
		}
	}
	return errs
}

func (r *ReleaseMode) validate() *apis.FieldError {
	var errs *apis.FieldError
	switch n := len(r.Revisions); n {
	case 0:
		errs = apis.ErrMissingField("revisions")
	case 1, 2:
		for i, name := range r.Revisions {
			if name == "" {
				errs = errs.Also(apis.ErrMissingField(fmt.Sprintf("revisions[%d]", i)))
			}
		}
	default:
		errs = apis.ErrGeneric(fmt.Sprintf("expected 1 or 2 revisions, got %d", n), "revisions")
	}
	switch p := r.RolloutPercent; {
	case p < 0 || p > 99:
		errs = errs.Also(apis.ErrOutOfBoundsValue(p, 0, 99, "rolloutPercent"))
	case p != 0 && len(r.Revisions) != 2:
		errs = errs.Also(apis.ErrGeneric("rolloutPercent needs two revisions: a current and a candidate", "rolloutPercent"))
	}
	return errs
}

// Validate checks the shape of a Configuration.
func (c *Configuration) Validate(ctx context.Context) *apis.FieldError {
	return c.Spec.validate(ctx).ViaField("spec")
}

func (cs *ConfigurationSpec) validate(ctx context.Context) *apis.FieldError {
	var errs *apis.FieldError
	if cs.Build != nil {
		errs = validateBuild(ctx, cs.Build).ViaField("build")
		if ts := cs.RevisionTemplate.Spec; ts.BuildRef != nil || ts.BuildName != "" {
			errs = errs.Also(apis.ErrGeneric("a Configuration's Revisions either get the build or name one, not both",
				"build", "revisionTemplate.spec.buildRef", "revisionTemplate.spec.buildName"))
		}
	}
	return errs.Also(cs.RevisionTemplate.Spec.validate(ctx).ViaField("revisionTemplate.spec"))
}

// Validate checks the shape of a Revision.
func (r *Revision) Validate(ctx context.Context) *apis.FieldError {
	return r.Spec.validate(ctx).ViaField("spec")
}

func (rs *RevisionSpec) validate(context.Context) *apis.FieldError {
	errs := validateBuildRef(rs.BuildRef, rs.BuildName)
	switch {
	case rs.Container == nil:
		errs = errs.Also(apis.ErrMissingField("container"))
	case rs.Container.Image == "":
		errs = errs.Also(apis.ErrMissingField("container.image"))
	}
	cc := rs.ContainerConcurrency
	switch rs.ConcurrencyModel {
	case "":
	case ConcurrencyModelSingle:
		if cc != nil && *cc != 1 {
			errs = errs.Also(apis.ErrGeneric(
				fmt.Sprintf("concurrencyModel Single means containerConcurrency 1, not %d", *cc),
				"concurrencyModel", "containerConcurrency"))
		}
	case ConcurrencyModelMulti:
		if cc != nil && *cc == 1 {
			errs = errs.Also(apis.ErrGeneric(
				"concurrencyModel Multi contradicts containerConcurrency 1",
				"concurrencyModel", "containerConcurrency"))
		}
	default:
		errs = errs.Also(apis.ErrInvalidValue(rs.ConcurrencyModel, "concurrencyModel",
			"must be Single or Multi"))
	}
	if rs.ServingState != "" && !validServingState(rs.ServingState) {
		errs = errs.Also(apis.ErrInvalidValue(rs.ServingState, "servingState",
			"must be Active, Reserve or Retired"))
	}
	return errs
}

// Validate checks the shape of a Route. The seed API's Route has nothing
// that v1 cannot check itself, so every check is left to v1's Validate.
func (r *Route) Validate(context.Context) *apis.FieldError {
	return nil
}
