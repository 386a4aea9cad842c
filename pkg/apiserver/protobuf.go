package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// protobufContentType is the wire encoding client-go's typed clients use for
// built-in kinds (kubectl create rolebinding sends it, for one).
const protobufContentType = "application/vnd.kubernetes.protobuf"

var protobufCodec = protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)

// protobufToJSON decodes a request body in Kubernetes' protobuf envelope
// and re-encodes it as JSON, for the built-in kinds client-go knows. As on
// a cluster, custom resources (Knative's kinds) have no protobuf form: a
// body naming one, or any body that does not decode, gets 415.
func protobufToJSON(body []byte) ([]byte, error) {
	obj, gvk, err := protobufCodec.Decode(body, nil, nil)
	if err != nil {
		return nil, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("the protobuf body cannot be decoded (only built-in kinds have a protobuf form; send JSON or YAML): %v", err))
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	return json.Marshal(obj)
}
