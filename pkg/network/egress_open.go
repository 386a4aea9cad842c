package network

import (
	"context"
	"fmt"
	"log/slog"
)

// OpenEgress returns the egress bridge's handle when enabled. When it is
// not, what an earlier run made as recorded in cfg.StateDir (attachments,
// chains, bridge) is removed by TearDownRecorded, whatever cfg says now:
// turning egress off leaves nothing behind and touches nothing else. What cannot be undone is logged; it
// does not keep knbox from starting.
func OpenEgress(ctx context.Context, cfg EgressConfig, enabled bool, log *slog.Logger) (*Egress, error) {
	if enabled {
		eg, err := NewEgress(cfg)
		if err != nil {
			return nil, fmt.Errorf("egress.enabled: %w", err)
		}
		return eg, nil
	}
	if err := TearDownRecorded(ctx, cfg.StateDir, cfg.PluginDirs, DefaultRoot); err != nil {
		log.Warn("egress is off, and what an earlier run made could not all be removed", "err", err)
	}
	return nil, nil
}
