// Command knbox is Knative Serving on one machine: `knbox serve` runs the
// server; the other commands are its clients. This file only parses flags
// and wires packages together.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/knbox/knbox/pkg/cli"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/daemon"
	"github.com/knbox/knbox/pkg/pod"
)

func main() {
	// A pod's shim (see package pod) starts on the path of every cold
	// instance: it skips building the CLI's command tree (every kubectl
	// command's flags), which it never uses.
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(pod.ShimMain(os.Args[2:]))
	}
	root := &cobra.Command{
		Use:           "knbox",
		Short:         "Knative Serving on one machine",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand())
	root.AddCommand(cli.Commands()...)

	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func serveCommand() *cobra.Command {
	var (
		configPath    string
		flags         config.Config
		debug         bool
		keepInstances bool
		handover      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the knbox server (Knative Serving API and data plane)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			// Flags given on the command line win over the file.
			if cmd.Flags().Changed("data-dir") {
				cfg.DataDir = flags.DataDir
			}
			if cmd.Flags().Changed("api-addr") {
				cfg.APIAddr = flags.APIAddr
			}
			if cmd.Flags().Changed("http-addr") {
				cfg.HTTPAddr = flags.HTTPAddr
			}
			if cmd.Flags().Changed("registry-addr") {
				cfg.Registry.Addr = flags.Registry.Addr
			}
			if cmd.Flags().Changed("token-auth-file") {
				cfg.TokenAuthFile = flags.TokenAuthFile
			}
			if cmd.Flags().Changed("keep-instances") {
				cfg.Restart.KeepInstances = &keepInstances
			}
			if cmd.Flags().Changed("metrics-addr") {
				cfg.Observability.MetricsAddr = flags.Observability.MetricsAddr
			}
			if cmd.Flags().Changed("log-format") {
				cfg.Observability.LogFormat = flags.Observability.LogFormat
			}
			if cmd.Flags().Changed("access-log") {
				cfg.Observability.AccessLog.Enabled = flags.Observability.AccessLog.Enabled
			}
			if cmd.Flags().Changed("handover-timeout") {
				cfg.Restart.HandoverTimeout = handover.String()
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			var handler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
			if cfg.Observability.LogFormat == "json" {
				handler = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
			}
			log := slog.New(handler)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return daemon.Run(ctx, cfg, log, func(api, data string) {
				fmt.Fprintf(os.Stderr, "knbox is up: API %s, HTTP %s\n  kubeconfig: %s kubeconfig --data-dir %s\n", api, data, os.Args[0], cfg.DataDir)
			})
		},
	}
	def := config.Default()
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "configuration file (YAML; see docs/knbox.example.yaml)")
	f.StringVar(&flags.DataDir, "data-dir", def.DataDir, "directory for the store, credentials and kubeconfig")
	f.StringVar(&flags.APIAddr, "api-addr", def.APIAddr, "address of the Kubernetes-style API (HTTPS)")
	f.StringVar(&flags.HTTPAddr, "http-addr", def.HTTPAddr, "address of the data plane (HTTP)")
	f.StringVar(&flags.Registry.Addr, "registry-addr", config.DefaultRegistryAddr, "address of the embedded OCI registry: plain HTTP on loopback, HTTPS elsewhere (registry.addr)")
	f.StringVar(&flags.TokenAuthFile, "token-auth-file", "", "extra bearer tokens, CSV as kube-apiserver's: token,user,uid,\"group1,group2\"")
	f.StringVar(&flags.Observability.MetricsAddr, "metrics-addr", "", "also serve /metrics over plain HTTP, without authentication, at this address (observability.metricsAddr)")
	f.BoolVar(&flags.Observability.AccessLog.Enabled, "access-log", false, "log every data plane request as a JSON line (observability.accessLog.enabled)")
	f.StringVar(&flags.Observability.LogFormat, "log-format", "text", "knbox's own log format: text or json (observability.logFormat)")
	f.BoolVar(&debug, "debug", false, "log at debug level")
	f.BoolVar(&keepInstances, "keep-instances", true, "leave instances running at exit, for the next knbox to adopt (restart.keepInstances)")
	f.DurationVar(&handover, "handover-timeout", config.DefaultHandoverTimeout, "how long an exiting knbox keeps its listening sockets for the next one (restart.handoverTimeout)")
	return cmd
}
