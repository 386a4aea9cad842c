package pod

import (
	"bytes"

	"github.com/knbox/knbox/pkg/logs"
)

// What the pod runtime writes into a pod's log besides the containers'
// output, as readers of one container's log need to know it.
var (
	exitLine     = []byte("knbox: ")
	exitedMark   = []byte(" exited (")
	livenessLine = []byte("knbox: liveness probe failed, restarting the container")
)

// RunEnded reports whether a record of a pod's log ends a run of its
// containers: the runtime's line for an exit or a liveness restart.
func RunEnded(r *logs.Record) bool {
	if !bytes.HasPrefix(r.Msg, exitLine) {
		return false
	}
	return bytes.HasPrefix(r.Msg, livenessLine) || bytes.Contains(r.Msg, exitedMark)
}

// ContainerLines selects the records of one container in the log of a pod
// with several containers, whose lines start with "[name] " (the tag is
// cut off), and the lines of no container (the runtime's own, /dev/log).
// With one container every record is its own.
func ContainerLines(container string, containers int) func(r *logs.Record) bool {
	if containers <= 1 {
		return nil
	}
	tag := []byte("[" + container + "] ")
	return func(r *logs.Record) bool {
		if m, ok := bytes.CutPrefix(r.Msg, tag); ok {
			r.Msg = m
			return true
		}
		if !bytes.HasPrefix(r.Msg, []byte("[")) {
			return true
		}
		// Another container's tag, or a line of this one's that starts
		// with "[": only "[name] " with a name of up to 63 characters
		// and no space is a tag.
		end := bytes.Index(r.Msg, []byte("] "))
		return end < 0 || end > 64 || bytes.ContainsAny(r.Msg[1:end], " []")
	}
}
