// Package logs is knbox's log store: the containers' output of every
// instance, kept in files in the CRI log format, rotated, merged by time
// and followed.
//
// A record is one line "<RFC3339Nano time> <stream> <F|P> <message>", as
// the kubelet writes container logs: stream is stdout, stderr or syslog
// (what a container sent to /dev/log); P marks a partial record whose line
// continues in the next record of that stream, F a full (or last) one.
// Lines longer than 16 KiB are split into partial records.
//
// A [File] is one instance's log, rotated at 10 MiB with one older file
// (.1) kept. A [LineWriter] cuts one stream's output into records. A
// [Store] lays the files out as <root>/<namespace>/<name>/<id>.log (name is
// the owner's, e.g. a Revision's; id the instance's), keeps the logs of the
// most recent stopped instances, and copies a group's logs merged in time
// order, following them as they grow.
//
// It knows nothing of Knative or of containers: the pod runtime writes
// files, the revision manager names them, the API's log subresource reads
// them. It must not import other knbox packages.
package logs
