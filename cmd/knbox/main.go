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

	"github.com/spf13/cobra"

	"github.com/knbox/knbox/pkg/cli"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/daemon"
)

func main() {
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
		configPath string
		flags      config.Config
		debug      bool
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
			if cmd.Flags().Changed("token-auth-file") {
				cfg.TokenAuthFile = flags.TokenAuthFile
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return daemon.Run(ctx, cfg, log, func(api, data string) {
				fmt.Fprintf(os.Stderr, "knbox is up: API %s, HTTP %s\n  kubeconfig: %s kubeconfig --data-dir %s\n", api, data, os.Args[0], cfg.DataDir)
			})
		},
	}
	def := config.Default()
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "configuration file (YAML; see examples/knbox.yaml)")
	f.StringVar(&flags.DataDir, "data-dir", def.DataDir, "directory for the store, credentials and kubeconfig")
	f.StringVar(&flags.APIAddr, "api-addr", def.APIAddr, "address of the Kubernetes-style API (HTTPS)")
	f.StringVar(&flags.HTTPAddr, "http-addr", def.HTTPAddr, "address of the data plane (HTTP)")
	f.StringVar(&flags.TokenAuthFile, "token-auth-file", "", "extra bearer tokens, CSV as kube-apiserver's: token,user,uid,\"group1,group2\"")
	f.BoolVar(&debug, "debug", false, "log at debug level")
	return cmd
}
