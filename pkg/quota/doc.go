// Package quota owns the resource policy of a namespace as Kubernetes
// defines it: core/v1 ResourceQuota (hard limits on object counts and on the
// sum of the requests and limits of a namespace's instances) and LimitRange
// (container defaults, minimum, maximum and limit/request ratio).
//
// It validates and defaults both kinds as kube-apiserver does, computes the
// pod spec an instance runs with (the Revision's pod spec with the
// namespace's LimitRange defaults, which land on the instance, never on the
// Revision) and its quota usage, and keeps the Ledger: the resources that
// running instances hold, per namespace, which admission consults and the
// runtime reserves before each instance it starts. In knbox an instance is
// the pod, so the pod quotas (pods, cpu, memory, requests.*, limits.*) count
// instances.
//
// It reads stored objects only through Source and must not import other
// knbox packages: the API server feeds it, the runtime calls it.
package quota
