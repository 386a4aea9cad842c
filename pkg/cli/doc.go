// Package cli owns knbox's client commands: apply, get, describe, wait,
// delete, api-resources, logs, image, kubeconfig and version. They speak to
// a knbox server (or any Kubernetes API server) only over the wire.
//
// The commands are the field's libraries wired together, not a second
// kubectl: the connection is cli-runtime's ConfigFlags (clientcmd's
// kubeconfig rules, contexts, tokens, exec plugins) with knbox's data-dir
// default (config.go); REST mapping and short names are client-go's
// restmapper over discovery; get, describe, wait and delete are kubectl's
// own command libraries (k8s.io/kubectl/pkg/cmd/...), so their flags,
// output formats and behaviour are kubectl's. What is knbox's own:
//   - apply (apply.go): it reads manifests itself (manifest.go), so that an
//     error names the file, the document and the field, and a document that
//     is no Kubernetes object is skipped with a note; the update is
//     kubectl's client-side apply (the last-applied annotation, a three-way
//     JSON merge patch, strategic for the kinds client-go knows), so knbox
//     apply and kubectl apply manage the same objects;
//   - errors worded for users, with "did you mean" for unknown resource
//     types and kinds (errors.go);
//   - logs (the revisions/log subresource), image (/knbox/v1/images) and
//     kubeconfig, which talk to knbox's own endpoints and files.
//
// This package must not import the server-side packages (apiserver,
// store, admission) outside tests: the client has to work against a server
// it does not share code with. test/deps keeps it so.
package cli
