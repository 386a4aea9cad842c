package main
import (
 _ "knative.dev/serving/pkg/apis/serving/v1"
 _ "knative.dev/serving/pkg/client/clientset/versioned"
 _ "knative.dev/serving/pkg/apis/config"
 _ "k8s.io/client-go/dynamic"
 _ "k8s.io/client-go/util/workqueue"
 _ "k8s.io/apimachinery/pkg/util/strategicpatch"
 _ "go.etcd.io/bbolt"
 _ "github.com/spf13/cobra"
 _ "k8s.io/api/node/v1"
 _ "sigs.k8s.io/yaml"
)
func main(){}
