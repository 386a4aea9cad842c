// Package cli owns knbox's client commands: apply, get, describe, wait,
// delete, api-resources, logs, image, kubeconfig and version. They speak to
// a knbox server (or any Kubernetes API server) only over the wire.
//
// The commands are knbox's own over client-go and cli-runtime's printers,
// not kubectl's command libraries (k8s.io/kubectl/pkg/cmd/...) nor
// cli-runtime's resource builder and genericclioptions: those link
// kustomize, starlark and some 170 more packages into the knbox binary,
// and every linked package initialises and keeps its pages resident in
// `knbox serve` too. test/deps keeps them out. The parts:
//   - the connection (config.go): kubectl's connection flags over
//     clientcmd (kubeconfig rules, contexts, tokens, exec plugins) with
//     knbox's data-dir default; discovery cached in memory; client-go's
//     shortcut REST mapper for short names and kinds;
//   - naming objects (resources.go): TYPE[,TYPE] [NAME...], TYPE/NAME,
//     categories such as "all", -l, --field-selector, -A, --all, and -f
//     through knbox's own manifest reading (manifest.go);
//   - get (get.go, print.go): the server's tables, as kubectl asks for
//     them, printed by cli-runtime's table printer; -o
//     yaml|json|name|jsonpath|go-template by cli-runtime's printers and
//     custom-columns by knbox's; --sort-by; -w through a watch;
//   - describe (describe.go): the same for every kind: metadata, spec and
//     status as YAML, conditions as a table, the object's Events;
//   - delete and wait (delete.go, wait.go): the dynamic client, with a
//     list and a watch to wait for conditions and deletions;
//   - api-resources (apiresources.go): discovery's preferred resources;
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
