package autoscaler

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"knative.dev/pkg/kmap"
	"knative.dev/serving/pkg/apis/autoscaling"
	asconfig "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"
)

// The scaling metrics the KPA supports (the values of autoscaling.knative.dev/metric).
const (
	MetricConcurrency = autoscaling.Concurrency // "concurrency": in-flight requests per instance
	MetricRPS         = autoscaling.RPS         // "rps": requests per second per instance
)

// DefaultTick is how often the Autoscaler decides, as Knative's autoscaler does.
const DefaultTick = 2 * time.Second

// Spec is how one revision is scaled: config-autoscaler combined with the
// Revision's annotations and containerConcurrency (see [SpecFor]).
//
// A Spec written by hand may leave fields zero: the rates, windows,
// threshold, target and grace period then take Knative's defaults (see
// [Spec.Normalize]). The scale bounds (MinScale, MaxScale, InitialScale,
// ActivationScale) and the durations ScaleDownDelay and
// ScaleToZeroPodRetention are taken literally: zero means zero.
type Spec struct {
	// Metric is MetricConcurrency (default) or MetricRPS.
	Metric string
	// Target is the value of the metric each instance should carry: the
	// total below times the target utilization; at least 0.01.
	Target float64
	// Total is the value one instance can carry before utilization
	// (containerConcurrency, the target annotation or the default).
	Total float64

	// StableWindow is the window of the stable average (60s by default).
	StableWindow time.Duration
	// PanicWindow is the window of the panic average (10% of StableWindow,
	// at least one second).
	PanicWindow time.Duration
	// PanicThreshold is the ratio of panic-window demand to ready instances
	// at which panic mode starts: 2 means 200%.
	PanicThreshold float64

	// MaxScaleUpRate bounds one decision to ceil(rate × ready) instances.
	MaxScaleUpRate float64
	// MaxScaleDownRate bounds one decision to at least floor(ready / rate).
	MaxScaleDownRate float64
	// ScaleDownDelay holds the maximum recommendation of this long a time
	// before a scale-down takes effect (0: none).
	ScaleDownDelay time.Duration

	// MinScale is the lower bound while the revision is reachable (0: none).
	MinScale int32
	// MaxScale is the upper bound (0: none).
	MaxScale int32
	// InitialScale is the scale the revision starts with and is held at
	// until it first has that many ready instances.
	InitialScale int32
	// ActivationScale is the least non-zero scale (values below 2: none).
	ActivationScale int32

	// DisableScaleToZero keeps at least one instance (config-autoscaler
	// enable-scale-to-zero: false).
	DisableScaleToZero bool
	// ScaleToZeroGracePeriod is how long the last instance is kept after the
	// revision goes inactive (30s by default).
	ScaleToZeroGracePeriod time.Duration
	// ScaleToZeroPodRetention is the least time the last instance is kept
	// after the revision goes inactive, while it is reachable (0: none).
	ScaleToZeroPodRetention time.Duration
}

// knativeDefaults is config-autoscaler with no keys set, from Knative's own parser.
var knativeDefaults = sync.OnceValue(func() *autoscalerconfig.Config {
	c, err := asconfig.NewConfigFromMap(nil)
	if err != nil {
		panic(fmt.Sprintf("knative's default config-autoscaler does not validate: %v", err))
	}
	return c
})

// ErrIgnored wraps each configuration value or annotation that [SpecFor] ignored.
var ErrIgnored = errors.New("ignored")

// SpecFor builds the Spec of one revision, with Knative's precedence: the
// Revision's autoscaling.knative.dev/* annotations (kebab-case keys first,
// then the legacy camelCase ones), then cfg, then Knative's defaults.
//
// cfg is config-autoscaler as Knative's parser returns it
// (knative.dev/serving/pkg/autoscaler/config.NewConfigFromMap); nil means all
// defaults. containerConcurrency is the Revision's (0: unlimited).
//
// Admission has already run Knative's validation on the annotations, but
// SpecFor does not trust it: an annotation or config value that Knative
// would reject is ignored and its default used. The returned Spec is
// therefore always usable; a non-nil error lists what was ignored (each entry
// wraps [ErrIgnored]) so the caller can log or surface it.
func SpecFor(cfg *autoscalerconfig.Config, annotations map[string]string, containerConcurrency int64) (Spec, error) {
	var errs []error
	ignore := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrIgnored))
	}
	c := sanitizeConfig(cfg, ignore)
	a := annotationReader{m: annotations, ignore: ignore}

	if containerConcurrency < 0 {
		ignore("containerConcurrency %d: negative", containerConcurrency)
		containerConcurrency = 0
	}

	s := Spec{
		MaxScaleUpRate:         c.MaxScaleUpRate,
		MaxScaleDownRate:       c.MaxScaleDownRate,
		DisableScaleToZero:     !c.EnableScaleToZero,
		ScaleToZeroGracePeriod: c.ScaleToZeroGracePeriod,
	}

	// Class: knbox has only the KPA. A revision asking for another class is
	// scaled by the KPA anyway, and told so.
	if k, v, ok := autoscaling.ClassAnnotation.Get(annotations); ok && v != autoscaling.KPA {
		ignore("annotation %s=%q: knbox scales every revision with the KPA", k, v)
	}

	// Metric and target.
	s.Metric = MetricConcurrency
	if k, v, ok := autoscaling.MetricAnnotation.Get(annotations); ok {
		switch v {
		case MetricConcurrency, MetricRPS:
			s.Metric = v
		default:
			ignore("annotation %s=%q: the KPA scales on %q or %q", k, v, MetricConcurrency, MetricRPS)
		}
	}
	var utilization float64
	switch s.Metric {
	case MetricRPS:
		s.Total, utilization = c.RPSTargetDefault, c.TargetUtilization
	default:
		s.Total, utilization = c.ContainerConcurrencyTargetDefault, c.ContainerConcurrencyTargetFraction
		if containerConcurrency > 0 {
			s.Total = float64(containerConcurrency)
		}
	}
	if v, ok := a.float(autoscaling.TargetAnnotation, autoscaling.TargetMin, math.MaxFloat64); ok {
		s.Total = v
		// Never aim above what containerConcurrency lets one instance take.
		if s.Metric == MetricConcurrency && containerConcurrency > 0 {
			s.Total = math.Min(v, float64(containerConcurrency))
		}
	}
	if v, ok := a.float(autoscaling.TargetUtilizationPercentageAnnotation, 1, 100); ok {
		utilization = v / 100
	}
	s.Target = math.Max(autoscaling.TargetMin, s.Total*utilization)

	// Windows and panic.
	s.StableWindow = c.StableWindow
	if v, ok := a.duration(autoscaling.WindowAnnotation, autoscaling.WindowMin, autoscaling.WindowMax, true); ok {
		s.StableWindow = v
	}
	panicPct := c.PanicWindowPercentage
	if v, ok := a.float(autoscaling.PanicWindowPercentageAnnotation,
		autoscaling.PanicWindowPercentageMin, autoscaling.PanicWindowPercentageMax); ok {
		panicPct = v
	}
	s.PanicWindow = panicWindow(s.StableWindow, panicPct)
	thresholdPct := c.PanicThresholdPercentage
	if v, ok := a.float(autoscaling.PanicThresholdPercentageAnnotation,
		autoscaling.PanicThresholdPercentageMin, autoscaling.PanicThresholdPercentageMax); ok {
		thresholdPct = v
	}
	s.PanicThreshold = thresholdPct / 100

	// Delays.
	s.ScaleDownDelay = c.ScaleDownDelay
	if v, ok := a.duration(autoscaling.ScaleDownDelayAnnotation, 0, autoscaling.WindowMax, true); ok {
		s.ScaleDownDelay = v
	}
	s.ScaleToZeroPodRetention = c.ScaleToZeroPodRetentionPeriod
	if v, ok := a.duration(autoscaling.ScaleToZeroPodRetentionPeriodAnnotation, 0, autoscaling.WindowMax, false); ok {
		s.ScaleToZeroPodRetention = v
	}

	// Scale bounds.
	s.MinScale, s.MaxScale = c.MinScale, c.MaxScale
	minA, minOK := a.int32(autoscaling.MinScaleAnnotation, 0)
	maxA, maxOK := a.int32(autoscaling.MaxScaleAnnotation, 0)
	if maxOK && c.MaxScaleLimit > 0 && (maxA == 0 || maxA > c.MaxScaleLimit) {
		ignore("annotation %s=%d: must be in [1, max-scale-limit %d]", autoscaling.MaxScaleAnnotationKey, maxA, c.MaxScaleLimit)
		maxOK = false
	}
	if minOK {
		s.MinScale = minA
	}
	if maxOK {
		s.MaxScale = maxA
	}
	if s.MaxScale > 0 && s.MinScale > s.MaxScale {
		// Knative's admission rejects such a pair of annotations, but not an
		// annotation against the configured bound; either way its scaler
		// applies min then max, so max-scale wins.
		ignore("%s=%d: above max-scale %d, which wins", autoscaling.MinScaleAnnotationKey, s.MinScale, s.MaxScale)
		s.MinScale = s.MaxScale
	}

	s.InitialScale = c.InitialScale
	if k, v, ok := autoscaling.InitialScaleAnnotation.Get(annotations); ok {
		switch n, err := strconv.ParseInt(v, 10, 32); {
		case err != nil || n < 0:
			ignore("annotation %s=%q: not an integer in [0, %d]", k, v, math.MaxInt32)
		case n == 0 && !c.AllowZeroInitialScale:
			ignore("annotation %s=0: allow-zero-initial-scale is false", k)
		default:
			s.InitialScale = int32(n)
		}
	}

	if n, ok := a.int32(autoscaling.ActivationScale, 2); ok {
		switch {
		case n < s.MinScale:
			ignore("annotation %s=%d: less than min-scale %d", autoscaling.ActivationScaleKey, n, s.MinScale)
		case s.MaxScale > 0 && n > s.MaxScale:
			ignore("annotation %s=%d: greater than max-scale %d", autoscaling.ActivationScaleKey, n, s.MaxScale)
		default:
			s.ActivationScale = n
		}
	}

	return s, errors.Join(errs...)
}

// panicWindow is pct percent of the stable window, rounded to the second and
// at least one second (Knative's metric bucket).
func panicWindow(stable time.Duration, pct float64) time.Duration {
	w := time.Duration(float64(stable) * pct / 100).Round(time.Second)
	if w < time.Second {
		w = time.Second
	}
	if w > stable {
		w = stable
	}
	return w
}

// sanitizeConfig returns a copy of cfg in which every value that Knative's
// config validation would reject is replaced by its default. A cfg from
// NewConfigFromMap passes through unchanged.
func sanitizeConfig(cfg *autoscalerconfig.Config, ignore func(string, ...any)) autoscalerconfig.Config {
	d := knativeDefaults()
	if cfg == nil {
		return *d
	}
	c := *cfg
	fix := func(bad bool, name string, val any, reset func()) {
		if bad {
			ignore("config-autoscaler %s=%v: out of range", name, val)
			reset()
		}
	}
	badFloat := func(f, lo, hi float64) bool { return math.IsNaN(f) || f < lo || f > hi }
	fix(badFloat(c.MaxScaleUpRate, math.Nextafter(1, 2), math.MaxFloat64), "max-scale-up-rate", c.MaxScaleUpRate,
		func() { c.MaxScaleUpRate = d.MaxScaleUpRate })
	fix(badFloat(c.MaxScaleDownRate, math.Nextafter(1, 2), math.MaxFloat64), "max-scale-down-rate", c.MaxScaleDownRate,
		func() { c.MaxScaleDownRate = d.MaxScaleDownRate })
	fix(badFloat(c.ContainerConcurrencyTargetFraction, math.SmallestNonzeroFloat64, 1), "container-concurrency-target-percentage",
		c.ContainerConcurrencyTargetFraction, func() { c.ContainerConcurrencyTargetFraction = d.ContainerConcurrencyTargetFraction })
	fix(badFloat(c.TargetUtilization, math.SmallestNonzeroFloat64, 1), "target utilization", c.TargetUtilization,
		func() { c.TargetUtilization = d.TargetUtilization })
	fix(badFloat(c.ContainerConcurrencyTargetDefault, autoscaling.TargetMin, math.MaxFloat64), "container-concurrency-target-default",
		c.ContainerConcurrencyTargetDefault, func() { c.ContainerConcurrencyTargetDefault = d.ContainerConcurrencyTargetDefault })
	fix(badFloat(c.RPSTargetDefault, autoscaling.TargetMin, math.MaxFloat64), "requests-per-second-target-default",
		c.RPSTargetDefault, func() { c.RPSTargetDefault = d.RPSTargetDefault })
	fix(badFloat(c.PanicWindowPercentage, autoscaling.PanicWindowPercentageMin, autoscaling.PanicWindowPercentageMax),
		"panic-window-percentage", c.PanicWindowPercentage, func() { c.PanicWindowPercentage = d.PanicWindowPercentage })
	// Knative's config validation does not bound the threshold; a threshold
	// at or below 100% would keep a revision in panic mode forever.
	fix(badFloat(c.PanicThresholdPercentage, math.Nextafter(100, 200), math.MaxFloat64), "panic-threshold-percentage",
		c.PanicThresholdPercentage, func() { c.PanicThresholdPercentage = d.PanicThresholdPercentage })
	fix(c.StableWindow < autoscaling.WindowMin || c.StableWindow > autoscaling.WindowMax ||
		c.StableWindow.Round(time.Second) != c.StableWindow, "stable-window", c.StableWindow,
		func() { c.StableWindow = d.StableWindow })
	fix(c.ScaleDownDelay < 0 || c.ScaleDownDelay > autoscaling.WindowMax, "scale-down-delay", c.ScaleDownDelay,
		func() { c.ScaleDownDelay = d.ScaleDownDelay })
	fix(c.ScaleToZeroGracePeriod <= 0, "scale-to-zero-grace-period", c.ScaleToZeroGracePeriod,
		func() { c.ScaleToZeroGracePeriod = d.ScaleToZeroGracePeriod })
	fix(c.ScaleToZeroPodRetentionPeriod < 0, "scale-to-zero-pod-retention-period", c.ScaleToZeroPodRetentionPeriod,
		func() { c.ScaleToZeroPodRetentionPeriod = d.ScaleToZeroPodRetentionPeriod })
	fix(c.MaxScaleLimit < 0, "max-scale-limit", c.MaxScaleLimit, func() { c.MaxScaleLimit = 0 })
	fix(c.MinScale < 0, "min-scale", c.MinScale, func() { c.MinScale = 0 })
	fix(c.MaxScale < 0 || (c.MaxScaleLimit > 0 && (c.MaxScale == 0 || c.MaxScale > c.MaxScaleLimit)), "max-scale", c.MaxScale,
		func() { c.MaxScale = c.MaxScaleLimit })
	fix(c.MaxScale > 0 && c.MinScale > c.MaxScale, "min-scale", c.MinScale, func() { c.MinScale = c.MaxScale })
	fix(c.InitialScale < 0 || (c.InitialScale == 0 && !c.AllowZeroInitialScale), "initial-scale", c.InitialScale,
		func() { c.InitialScale = d.InitialScale })
	return c
}

// annotationReader parses annotation values, reporting the ones it ignores.
type annotationReader struct {
	m      map[string]string
	ignore func(string, ...any)
}

func (a annotationReader) float(key kmap.KeyPriority, lo, hi float64) (float64, bool) {
	k, v, ok := key.Get(a.m)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		a.ignore("annotation %s=%q: not a number in [%g, %g]", k, v, lo, hi)
		return 0, false
	}
	return f, true
}

func (a annotationReader) int32(key kmap.KeyPriority, lo int32) (int32, bool) {
	k, v, ok := key.Get(a.m)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < int64(lo) {
		a.ignore("annotation %s=%q: not an integer in [%d, %d]", k, v, lo, math.MaxInt32)
		return 0, false
	}
	return int32(n), true
}

func (a annotationReader) duration(key kmap.KeyPriority, lo, hi time.Duration, wholeSeconds bool) (time.Duration, bool) {
	k, v, ok := key.Get(a.m)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi || (wholeSeconds && d.Truncate(time.Second) != d) {
		a.ignore("annotation %s=%q: not a duration in [%v, %v]", k, v, lo, hi)
		return 0, false
	}
	return d, true
}

// Normalize returns s with every zero or invalid rate, window, threshold,
// target and grace period replaced by Knative's default, and the scale
// bounds made consistent (non-negative, MinScale <= MaxScale when MaxScale is
// set). A Spec from [SpecFor] is returned unchanged.
func (s Spec) Normalize() Spec {
	d := knativeDefaults()
	if s.Metric != MetricRPS {
		s.Metric = MetricConcurrency
	}
	if !(s.Target >= autoscaling.TargetMin) || math.IsInf(s.Target, 1) {
		if s.Metric == MetricRPS {
			s.Target = d.RPSTargetDefault * d.TargetUtilization
		} else {
			s.Target = d.ContainerConcurrencyTargetDefault * d.ContainerConcurrencyTargetFraction
		}
	}
	if !(s.Total >= s.Target) || math.IsInf(s.Total, 1) {
		s.Total = s.Target
	}
	if s.StableWindow < time.Second {
		s.StableWindow = d.StableWindow
	}
	if s.StableWindow > autoscaling.WindowMax {
		s.StableWindow = autoscaling.WindowMax
	}
	if s.PanicWindow <= 0 {
		s.PanicWindow = panicWindow(s.StableWindow, d.PanicWindowPercentage)
	}
	s.PanicWindow = min(max(s.PanicWindow, time.Second), s.StableWindow)
	if !(s.PanicThreshold > 1) {
		s.PanicThreshold = d.PanicThresholdPercentage / 100
	}
	if !(s.MaxScaleUpRate > 1) {
		s.MaxScaleUpRate = d.MaxScaleUpRate
	}
	if !(s.MaxScaleDownRate > 1) {
		s.MaxScaleDownRate = d.MaxScaleDownRate
	}
	s.ScaleDownDelay = max(s.ScaleDownDelay, 0)
	if s.ScaleToZeroGracePeriod <= 0 {
		s.ScaleToZeroGracePeriod = d.ScaleToZeroGracePeriod
	}
	s.ScaleToZeroPodRetention = max(s.ScaleToZeroPodRetention, 0)
	s.MinScale = max(s.MinScale, 0)
	s.MaxScale = max(s.MaxScale, 0)
	if s.MaxScale > 0 && s.MinScale > s.MaxScale {
		s.MinScale = s.MaxScale
	}
	s.InitialScale = max(s.InitialScale, 0)
	if s.ActivationScale < 2 {
		s.ActivationScale = 0
	}
	return s
}
