// Package cli owns knbox's client commands: apply, get, delete, kubeconfig
// and version. They speak to a knbox server (or any Kubernetes API server)
// only over the wire, with client-go: discovery to resolve kinds, the
// dynamic client for objects, server-side Tables for what `get` prints.
//
// The logic lives in testable functions (ReadManifests, Resolver, Client,
// PrintTable); the cobra commands in commands.go only parse flags and
// wire them. Apply is kubectl's client-side apply (a three-way JSON merge
// patch kept in the kubectl.kubernetes.io/last-applied-configuration
// annotation), so knbox apply and kubectl apply manage the same objects.
//
// This package must not import the server-side packages (apiserver, store,
// admission) outside tests: the client has to work against a server it
// does not share code with.
package cli
