package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// accessor returns the object's metadata. Every served kind embeds
// metav1.ObjectMeta.
func accessor(o runtime.Object) *metav1.ObjectMeta {
	return o.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)
}

// output says how a response is encoded.
type output struct {
	yaml    bool
	table   *tableOptions
	partial string // meta.k8s.io version when PartialObjectMetadata(List) was asked for
}

// negotiate picks the response encoding from the Accept header, as the
// Kubernetes API server does: the first acceptable entry wins.
func negotiate(r *http.Request) (output, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return output{}, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/json", "application/*", "*/*", "application/yaml", "text/yaml", "application/x-yaml":
		default:
			continue
		}
		out := output{yaml: strings.HasSuffix(mt, "yaml")}
		switch params["as"] {
		case "":
		case "Table":
			if params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1") {
				continue
			}
			inc := metav1.IncludeObjectPolicy(r.URL.Query().Get("includeObject"))
			switch inc {
			case "", metav1.IncludeMetadata, metav1.IncludeNone, metav1.IncludeObject:
			default:
				return output{}, apierrors.NewBadRequest(fmt.Sprintf("includeObject: unsupported value %q (supported: None, Metadata, Object)", inc))
			}
			out.table = &tableOptions{version: params["v"], includeObject: inc}
		case "PartialObjectMetadata", "PartialObjectMetadataList":
			if params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1") {
				continue
			}
			out.partial = params["v"]
		default:
			continue
		}
		return out, nil
	}
	return output{}, errNotAcceptable(accept)
}

// writeObject encodes obj with the negotiated encoding.
func writeObject(w http.ResponseWriter, code int, out output, obj interface{}) {
	var (
		body []byte
		err  error
		ct   = "application/json"
	)
	if out.yaml {
		ct = "application/yaml"
		body, err = yaml.Marshal(obj)
	} else {
		body, err = json.Marshal(obj)
	}
	if err != nil {
		code = http.StatusInternalServerError
		body, _ = json.Marshal(statusOf(err))
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
	if !out.yaml {
		_, _ = w.Write([]byte("\n"))
	}
}

// writeError encodes err as a metav1.Status.
func writeError(w http.ResponseWriter, err error) {
	st := statusOf(err)
	st.Kind, st.APIVersion = "Status", "v1"
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeObject(w, code, output{}, st)
}

// bodyFormat is how a request body is encoded.
type bodyFormat int

const (
	formatJSON bodyFormat = iota
	formatYAML
	formatMergePatch
	formatJSONPatch
	formatStrategicPatch
	formatProtobuf
	formatApply
)

// requestFormat reads the Content-Type of a write.
func requestFormat(r *http.Request, patch bool) (bodyFormat, error) {
	ct := r.Header.Get("Content-Type")
	mt := ""
	if ct != "" {
		var err error
		mt, _, err = mime.ParseMediaType(ct)
		if err != nil {
			return 0, errUnsupportedMediaType(ct)
		}
	}
	if patch {
		switch mt {
		case "application/merge-patch+json":
			return formatMergePatch, nil
		case "application/json-patch+json":
			return formatJSONPatch, nil
		case "application/strategic-merge-patch+json":
			return formatStrategicPatch, nil
		case "application/apply-patch+yaml":
			return formatApply, nil
		}
		return 0, errUnsupportedMediaType(ct)
	}
	switch mt {
	case "", "application/json":
		return formatJSON, nil
	case "application/yaml", "text/yaml", "application/x-yaml":
		return formatYAML, nil
	case protobufContentType:
		return formatProtobuf, nil
	}
	return 0, errUnsupportedMediaType(ct)
}

// toJSON normalises a request body to JSON.
func toJSON(body []byte, f bodyFormat) ([]byte, error) {
	if f == formatProtobuf {
		return protobufToJSON(body)
	}
	if f != formatYAML {
		return body, nil
	}
	j, err := yaml.YAMLToJSONStrict(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
	}
	return j, nil
}

// fieldValidation is the ?fieldValidation directive. Without one, knbox
// behaves as a cluster's endpoint for custom resources (which Knative's kinds
// are there): unknown fields are dropped with a warning. kubectl sends Strict
// (its default --validate=strict), which refuses them.
type fieldValidation string

const (
	validationStrict fieldValidation = "Strict"
	validationWarn   fieldValidation = "Warn"
	validationIgnore fieldValidation = "Ignore"
)

func parseFieldValidation(r *http.Request) (fieldValidation, error) {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "Strict":
		return validationStrict, nil
	case "", "Warn":
		return validationWarn, nil
	case "Ignore":
		return validationIgnore, nil
	default:
		return "", apierrors.NewBadRequest(fmt.Sprintf("fieldValidation: invalid value %q: must be one of Ignore, Warn, Strict", v))
	}
}

// decodeStrict unmarshals JSON into obj. Unknown and duplicate fields are
// returned as messages; a syntax or type error is returned as err.
func decodeStrict(data []byte, obj interface{}) (unknown []string, err error) {
	strictErrs, err := sigsjson.UnmarshalStrict(data, obj, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	for _, e := range strictErrs {
		unknown = append(unknown, e.Error())
	}
	return unknown, nil
}

// typeMeta reads apiVersion and kind of a JSON body without decoding the rest.
func typeMeta(data []byte) (metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&tm); err != nil {
		return tm, err
	}
	return tm, nil
}
