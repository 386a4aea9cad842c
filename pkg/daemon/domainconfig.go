package daemon

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	routecfg "knative.dev/serving/pkg/reconciler/route/config"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/kubeclient"
)

// Where config-domain can change without a restart: the ConfigMap Knative
// reads, in Knative's system namespace. When it exists, its data replaces
// the config file's config-domain (knbox's default of "localhost" still
// applies when it names no default domain); deleting it goes back to the
// file's. A ConfigMap that Knative's parser refuses is logged and ignored.
const (
	systemNamespace       = "knative-serving"
	domainConfigMapName   = config.DomainName
	domainConfigMapResync = 10 * time.Minute
)

// watchDomainConfig applies knative-serving/config-domain to c until ctx
// ends; fileDomain is the config file's.
func watchDomainConfig(ctx context.Context, kube kubeclient.Interface, c *controller.Controller, fileDomain *routecfg.Domain, log *slog.Logger) {
	f := kubeclient.NewInformers(kube, kubeclient.InformerOptions{Resync: domainConfigMapResync, Namespace: systemNamespace, Transform: controller.TrimForCache,
		Tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", domainConfigMapName).String()
		}})
	apply := func(obj interface{}) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != domainConfigMapName {
			return
		}
		d, err := config.ParseDomain(cm.Data)
		if err != nil {
			log.Warn("the config-domain ConfigMap is not applied", "namespace", systemNamespace, "err", err)
			return
		}
		log.Info("config-domain changed", "namespace", systemNamespace, "resourceVersion", cm.ResourceVersion)
		c.SetDomain(d)
	}
	_, _ = f.ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, n interface{}) { apply(n) },
		DeleteFunc: func(interface{}) {
			log.Info("config-domain ConfigMap deleted: the config file's applies", "namespace", systemNamespace)
			c.SetDomain(fileDomain)
		},
	})
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
}
