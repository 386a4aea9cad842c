package autoscaler

import (
	"errors"
	"strings"
	"testing"
	"time"

	asconfig "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"
)

func mustConfig(t testing.TB, data map[string]string) *autoscalerconfig.Config {
	t.Helper()
	c, err := asconfig.NewConfigFromMap(data)
	if err != nil {
		t.Fatalf("config-autoscaler %v: %v", data, err)
	}
	return c
}

func mustSpec(t testing.TB, cfg *autoscalerconfig.Config, ann map[string]string, cc int64) Spec {
	t.Helper()
	s, err := SpecFor(cfg, ann, cc)
	if err != nil {
		t.Fatalf("SpecFor(%v, %d): %v", ann, cc, err)
	}
	return s
}

const as = "autoscaling.knative.dev/"

func TestSpecForDefaults(t *testing.T) {
	t.Parallel()
	got := mustSpec(t, nil, nil, 0)
	want := Spec{
		Metric:                 MetricConcurrency,
		Target:                 70,
		Total:                  100,
		StableWindow:           60 * time.Second,
		PanicWindow:            6 * time.Second,
		PanicThreshold:         2,
		MaxScaleUpRate:         1000,
		MaxScaleDownRate:       2,
		InitialScale:           1,
		ScaleToZeroGracePeriod: 30 * time.Second,
	}
	if got != want {
		t.Errorf("SpecFor(defaults) =\n%+v\nwant\n%+v", got, want)
	}
	if got.Normalize() != got {
		t.Errorf("Normalize changed a SpecFor spec: %+v", got.Normalize())
	}
	// The same from a parsed, empty config-autoscaler.
	if got2 := mustSpec(t, mustConfig(t, nil), map[string]string{}, 0); got2 != want {
		t.Errorf("SpecFor(empty config) = %+v", got2)
	}
}

func TestSpecFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   map[string]string
		ann   map[string]string
		cc    int64
		check func(Spec) bool
	}{
		{"containerConcurrency is the total", nil, nil, 10,
			func(s Spec) bool { return s.Total == 10 && s.Target == 7 }},
		{"containerConcurrency 1 targets 0.7", nil, nil, 1,
			func(s Spec) bool { return s.Target == 0.7 }},
		{"target annotation", nil, map[string]string{as + "target": "50"}, 0,
			func(s Spec) bool { return s.Total == 50 && s.Target == 35 }},
		{"target above containerConcurrency is capped", nil, map[string]string{as + "target": "50"}, 10,
			func(s Spec) bool { return s.Total == 10 && s.Target == 7 }},
		{"target below containerConcurrency wins", nil, map[string]string{as + "target": "5"}, 10,
			func(s Spec) bool { return s.Total == 5 && s.Target == 3.5 }},
		{"target utilization", nil, map[string]string{as + "target-utilization-percentage": "50"}, 0,
			func(s Spec) bool { return s.Target == 50 }},
		{"legacy targetUtilizationPercentage", nil, map[string]string{as + "targetUtilizationPercentage": "80"}, 0,
			func(s Spec) bool { return s.Target == 80 }},
		{"kebab-case wins over camelCase", nil, map[string]string{as + "min-scale": "2", as + "minScale": "5"}, 0,
			func(s Spec) bool { return s.MinScale == 2 }},
		{"config utilization", map[string]string{"container-concurrency-target-percentage": "50"}, nil, 0,
			func(s Spec) bool { return s.Target == 50 }},
		{"config target default", map[string]string{"container-concurrency-target-default": "10"}, nil, 0,
			func(s Spec) bool { return s.Target == 7 }},
		{"rps default: 200 at 70%", nil, map[string]string{as + "metric": "rps"}, 0,
			func(s Spec) bool { return s.Metric == MetricRPS && s.Total == 200 && s.Target == 140 }},
		{"rps ignores containerConcurrency", nil, map[string]string{as + "metric": "rps"}, 5,
			func(s Spec) bool { return s.Total == 200 }},
		{"rps target", nil, map[string]string{as + "metric": "rps", as + "target": "100", as + "target-utilization-percentage": "100"}, 5,
			func(s Spec) bool { return s.Target == 100 }},
		{"config rps default", map[string]string{"requests-per-second-target-default": "10"}, map[string]string{as + "metric": "rps"}, 0,
			func(s Spec) bool { return s.Target == 7 }},
		{"window and panic window", nil, map[string]string{as + "window": "100s", as + "panic-window-percentage": "20"}, 0,
			func(s Spec) bool { return s.StableWindow == 100*time.Second && s.PanicWindow == 20*time.Second }},
		{"panic window at least a second", nil, map[string]string{as + "window": "6s", as + "panicWindowPercentage": "1"}, 0,
			func(s Spec) bool { return s.PanicWindow == time.Second }},
		{"config windows", map[string]string{"stable-window": "2m", "panic-window-percentage": "5"}, nil, 0,
			func(s Spec) bool { return s.StableWindow == 2*time.Minute && s.PanicWindow == 6*time.Second }},
		{"panic threshold", nil, map[string]string{as + "panic-threshold-percentage": "150"}, 0,
			func(s Spec) bool { return s.PanicThreshold == 1.5 }},
		{"rates from config", map[string]string{"max-scale-up-rate": "10", "max-scale-down-rate": "4"}, nil, 0,
			func(s Spec) bool { return s.MaxScaleUpRate == 10 && s.MaxScaleDownRate == 4 }},
		{"scale-down-delay", nil, map[string]string{as + "scale-down-delay": "30s"}, 0,
			func(s Spec) bool { return s.ScaleDownDelay == 30*time.Second }},
		{"legacy scaleDownDelay", nil, map[string]string{as + "scaleDownDelay": "1m"}, 0,
			func(s Spec) bool { return s.ScaleDownDelay == time.Minute }},
		{"retention", nil, map[string]string{as + "scale-to-zero-pod-retention-period": "1m30s"}, 0,
			func(s Spec) bool { return s.ScaleToZeroPodRetention == 90*time.Second }},
		{"config retention and grace", map[string]string{"scale-to-zero-pod-retention-period": "1m", "scale-to-zero-grace-period": "10s"}, nil, 0,
			func(s Spec) bool {
				return s.ScaleToZeroPodRetention == time.Minute && s.ScaleToZeroGracePeriod == 10*time.Second
			}},
		{"min and max", nil, map[string]string{as + "min-scale": "2", as + "max-scale": "7"}, 0,
			func(s Spec) bool { return s.MinScale == 2 && s.MaxScale == 7 }},
		{"legacy minScale maxScale", nil, map[string]string{as + "minScale": "1", as + "maxScale": "3"}, 0,
			func(s Spec) bool { return s.MinScale == 1 && s.MaxScale == 3 }},
		{"config min and max", map[string]string{"min-scale": "1", "max-scale": "9"}, nil, 0,
			func(s Spec) bool { return s.MinScale == 1 && s.MaxScale == 9 }},
		{"annotation overrides config max", map[string]string{"max-scale": "9"}, map[string]string{as + "max-scale": "0"}, 0,
			func(s Spec) bool { return s.MaxScale == 0 }},
		{"initial scale", nil, map[string]string{as + "initial-scale": "3"}, 0,
			func(s Spec) bool { return s.InitialScale == 3 }},
		{"initial scale 0 allowed", map[string]string{"allow-zero-initial-scale": "true"}, map[string]string{as + "initialScale": "0"}, 0,
			func(s Spec) bool { return s.InitialScale == 0 }},
		{"config initial scale 0", map[string]string{"allow-zero-initial-scale": "true", "initial-scale": "0"}, nil, 0,
			func(s Spec) bool { return s.InitialScale == 0 }},
		{"activation scale", nil, map[string]string{as + "activation-scale": "2"}, 0,
			func(s Spec) bool { return s.ActivationScale == 2 }},
		{"scale to zero disabled", map[string]string{"enable-scale-to-zero": "false"}, nil, 0,
			func(s Spec) bool { return s.DisableScaleToZero }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustSpec(t, mustConfig(t, tc.cfg), tc.ann, tc.cc)
			if !tc.check(s) {
				t.Errorf("SpecFor(%v, %v, %d) = %+v", tc.cfg, tc.ann, tc.cc, s)
			}
			if s.Normalize() != s {
				t.Errorf("Normalize changed a SpecFor spec: %+v", s.Normalize())
			}
		})
	}
}

// Values that Knative's admission rejects fall back to the defaults and are reported.
func TestSpecForBadAnnotationsFallBack(t *testing.T) {
	t.Parallel()
	def := mustSpec(t, nil, nil, 0)
	for _, tc := range []struct {
		name string
		cfg  map[string]string
		ann  map[string]string
		cc   int64
		want func(s Spec) bool
	}{
		{"target not a number", nil, map[string]string{as + "target": "lots"}, 0, nil},
		{"target too small", nil, map[string]string{as + "target": "0.001"}, 0, nil},
		{"target NaN", nil, map[string]string{as + "target": "NaN"}, 0, nil},
		{"target Inf", nil, map[string]string{as + "target": "+Inf"}, 0, nil},
		{"utilization 0", nil, map[string]string{as + "target-utilization-percentage": "0"}, 0, nil},
		{"utilization 101", nil, map[string]string{as + "target-utilization-percentage": "101"}, 0, nil},
		{"metric cpu", nil, map[string]string{as + "metric": "cpu"}, 0, nil},
		{"class hpa", nil, map[string]string{as + "class": "hpa.autoscaling.knative.dev"}, 0, nil},
		{"window too short", nil, map[string]string{as + "window": "5s"}, 0, nil},
		{"window too long", nil, map[string]string{as + "window": "2h"}, 0, nil},
		{"window sub-second", nil, map[string]string{as + "window": "10500ms"}, 0, nil},
		{"window garbage", nil, map[string]string{as + "window": "sixty"}, 0, nil},
		{"panic window 0", nil, map[string]string{as + "panic-window-percentage": "0"}, 0, nil},
		{"panic threshold 100", nil, map[string]string{as + "panic-threshold-percentage": "100"}, 0, nil},
		{"panic threshold 2000", nil, map[string]string{as + "panicThresholdPercentage": "2000"}, 0, nil},
		{"scale-down-delay negative", nil, map[string]string{as + "scale-down-delay": "-1s"}, 0, nil},
		{"scale-down-delay sub-second", nil, map[string]string{as + "scale-down-delay": "1.5s"}, 0, nil},
		{"retention negative", nil, map[string]string{as + "scale-to-zero-pod-retention-period": "-1m"}, 0, nil},
		{"retention too long", nil, map[string]string{as + "scaleToZeroPodRetentionPeriod": "2h"}, 0, nil},
		{"min negative", nil, map[string]string{as + "min-scale": "-1"}, 0, nil},
		{"min garbage", nil, map[string]string{as + "min-scale": "one"}, 0, nil},
		{"max overflow", nil, map[string]string{as + "max-scale": "99999999999"}, 0, nil},
		{"min above max", nil, map[string]string{as + "min-scale": "5", as + "max-scale": "3"}, 0,
			func(s Spec) bool { return s.MinScale == 3 && s.MaxScale == 3 }},
		{"min above configured max", map[string]string{"max-scale": "4"}, map[string]string{as + "min-scale": "5"}, 0,
			func(s Spec) bool { return s.MinScale == 4 && s.MaxScale == 4 }},
		{"max above limit", map[string]string{"max-scale-limit": "10", "max-scale": "10"}, map[string]string{as + "max-scale": "11"}, 0,
			func(s Spec) bool { return s.MaxScale == 10 }},
		{"max unlimited with a limit", map[string]string{"max-scale-limit": "10", "max-scale": "4"}, map[string]string{as + "max-scale": "0"}, 0,
			func(s Spec) bool { return s.MaxScale == 4 }},
		{"initial 0 not allowed", nil, map[string]string{as + "initial-scale": "0"}, 0, nil},
		{"initial negative", nil, map[string]string{as + "initial-scale": "-2"}, 0, nil},
		{"activation 1", nil, map[string]string{as + "activation-scale": "1"}, 0, nil},
		{"activation below min", nil, map[string]string{as + "activation-scale": "2", as + "min-scale": "3"}, 0,
			func(s Spec) bool { return s.ActivationScale == 0 && s.MinScale == 3 }},
		{"activation above max", nil, map[string]string{as + "activation-scale": "4", as + "max-scale": "3"}, 0,
			func(s Spec) bool { return s.ActivationScale == 0 && s.MaxScale == 3 }},
		{"negative containerConcurrency", nil, nil, -3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := SpecFor(mustConfig(t, tc.cfg), tc.ann, tc.cc)
			if err == nil || !errors.Is(err, ErrIgnored) {
				t.Errorf("SpecFor(%v) error = %v, want one wrapping ErrIgnored", tc.ann, err)
			}
			for k := range tc.ann {
				if err != nil && !strings.Contains(err.Error(), k) && !strings.Contains(err.Error(), strings.TrimPrefix(k, as)) {
					t.Errorf("error %q does not name %s", err, k)
				}
			}
			if tc.want != nil {
				if !tc.want(s) {
					t.Errorf("SpecFor(%v) = %+v", tc.ann, s)
				}
				return
			}
			if s != def {
				t.Errorf("SpecFor(%v) =\n%+v\nwant the defaults\n%+v", tc.ann, s, def)
			}
		})
	}
}

// A config built by hand, not by NewConfigFromMap, is sanitised too.
func TestSpecForBadConfig(t *testing.T) {
	t.Parallel()
	s, err := SpecFor(&autoscalerconfig.Config{}, nil, 0)
	if !errors.Is(err, ErrIgnored) {
		t.Errorf("error = %v, want ErrIgnored", err)
	}
	def := mustSpec(t, nil, nil, 0)
	def.DisableScaleToZero = true // the zero Config says so, and that is valid
	if s != def {
		t.Errorf("SpecFor(zero config) =\n%+v\nwant\n%+v", s, def)
	}
}

func TestNormalizeZeroSpec(t *testing.T) {
	t.Parallel()
	got := Spec{}.Normalize()
	want := mustSpec(t, nil, nil, 0)
	want.Total = want.Target // no capacity given: the target
	want.InitialScale = 0    // bounds are literal
	if got != want {
		t.Errorf("Spec{}.Normalize() =\n%+v\nwant\n%+v", got, want)
	}
	rps := Spec{Metric: MetricRPS}.Normalize()
	if rps.Target != 140 {
		t.Errorf("rps target = %v, want 140", rps.Target)
	}
	odd := Spec{Metric: "cpu", MinScale: 9, MaxScale: 3, ActivationScale: 1, PanicThreshold: 0.5}.Normalize()
	if odd.Metric != MetricConcurrency || odd.MinScale != 3 || odd.ActivationScale != 0 || odd.PanicThreshold != 2 {
		t.Errorf("Normalize = %+v", odd)
	}
}
