package v1alpha1

import (
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// TestDeepCopy fills every exported field of every type with values, copies
// it, checks the copy is equal, then changes every value of the original in
// place and checks the copy did not change with it.
func TestDeepCopy(t *testing.T) {
	for _, obj := range []runtime.Object{
		&Service{}, &ServiceList{}, &Configuration{}, &ConfigurationList{},
		&Revision{}, &RevisionList{}, &Route{}, &RouteList{},
	} {
		t.Run(reflect.TypeOf(obj).Elem().Name(), func(t *testing.T) {
			seed := 0
			fill(reflect.ValueOf(obj).Elem(), &seed, 0)
			cp := obj.DeepCopyObject()
			if !reflect.DeepEqual(obj, cp) {
				t.Fatal("copy differs from the original")
			}
			mutate(reflect.ValueOf(obj).Elem())
			fresh := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
			seed = 0
			fill(reflect.ValueOf(fresh).Elem(), &seed, 0)
			if !reflect.DeepEqual(fresh, cp) {
				t.Fatal("changing the original changed the copy: they share memory")
			}
		})
	}
}

// TestDeepCopyCheckFindsSharing makes sure TestDeepCopy would notice a
// shallow copy.
func TestDeepCopyCheckFindsSharing(t *testing.T) {
	seed := 0
	orig := &Service{}
	fill(reflect.ValueOf(orig).Elem(), &seed, 0)
	shallow := *orig
	mutate(reflect.ValueOf(orig).Elem())
	fresh := &Service{}
	seed = 0
	fill(reflect.ValueOf(fresh).Elem(), &seed, 0)
	if reflect.DeepEqual(fresh, &shallow) {
		t.Fatal("a shallow copy went unnoticed")
	}
}

// fill sets every settable value below v to a non-zero value.
func fill(v reflect.Value, seed *int, depth int) {
	*seed++
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 12 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed, depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				fill(f, seed, depth+1)
			}
		}
	case reflect.Slice:
		if depth > 12 {
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fill(s.Index(i), seed, depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			fill(k, seed, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, seed, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString("s" + strconv.Itoa(*seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*seed % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*seed % 100))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*seed))
	}
}

// mutate changes, in place, every value below v.
func mutate(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			mutate(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				mutate(f)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			mutate(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			if e.Kind() == reflect.Pointer || e.Kind() == reflect.Slice || e.Kind() == reflect.Map {
				mutate(e) // shares memory with the map's element
			} else {
				mutate(e)
				v.SetMapIndex(k, e)
			}
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	}
}

// TestImportsNoImplementation keeps the API types free of knbox's
// implementation: this package may import no other knbox package but the
// API types of builds (a Configuration's build is one).
func TestImportsNoImplementation(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/knbox/knbox/pkg/apis/serving/v1alpha1"
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/knbox/knbox/") && dep != self && dep != "github.com/knbox/knbox/pkg/apis/build/v1alpha1" {
			t.Errorf("imports %s", dep)
		}
	}
}
