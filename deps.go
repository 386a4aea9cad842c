package main

import (
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "k8s.io/api/node/v1"
	_ "k8s.io/apimachinery/pkg/util/strategicpatch"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/util/workqueue"
	_ "knative.dev/serving/pkg/apis/config"
	_ "knative.dev/serving/pkg/apis/serving/v1"
	_ "knative.dev/serving/pkg/client/clientset/versioned"
	_ "sigs.k8s.io/yaml"
)

func main() {}
