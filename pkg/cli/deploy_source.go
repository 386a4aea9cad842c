package cli

import (
	"context"
	"errors"
	"io"
)

// deploySource builds o.source into an image and deploys it: `knbox deploy
// NAME --source DIR [--builder IMAGE]`. It belongs to the build support
// (issue 16 item 2), which replaces this file; until then it says so.
var deploySource = func(ctx context.Context, s *session, out io.Writer, name string, o deployOptions) error {
	return errors.New("--source: this knbox cannot build images yet; build one, push it to knbox's registry (README \"Pushing images to knbox\") and deploy it with --image")
}
