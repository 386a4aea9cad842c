package controller

import (
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// ImageDigests returns the image digests every Revision in the API runs,
// sorted, from the informers' cache: what the image cache's prune keeps
// (a superset of what runs, so an image is never pruned under a revision
// that scales from zero later).
func (c *Controller) ImageDigests() ([]string, error) {
	for _, synced := range c.synced {
		if !synced() {
			return nil, errors.New("the controllers are starting: try again")
		}
	}
	revs, err := c.revisions.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var keep []string
	for _, r := range revs {
		for _, cs := range r.Status.ContainerStatuses {
			if cs.ImageDigest != "" {
				keep = append(keep, cs.ImageDigest)
			}
		}
	}
	slices.Sort(keep)
	return slices.Compact(keep), nil
}
