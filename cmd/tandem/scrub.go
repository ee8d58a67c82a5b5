package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

func init() {
	var cf connectFlags
	cmd := &cobra.Command{
		Use:   "scrub [--data DIR | --meta ADDR --secret-file F]",
		Short: "Start a scrub on every storage server now",
		Long: `Ask every storage server to start a scrub now, as after a disk or
controller event, without waiting for its schedule (--scrub-every of
"tandem storage", a week by default). A scrub reads back every stored block
at the server's --scrub-rate, verifies its checksum and rewrites bad blocks
from a good copy; a server already scrubbing starts another pass when the
current one ends. The metadata leader also checks the parity of every
erasure-coded file (every shard of every stripe read, missing or wrong shards
rebuilt). "tandem status" shows the progress and what was found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, secret, err := cf.clusterStatus()
			if err != nil {
				return err
			}
			var errs []error
			for _, srv := range st.Map.Servers {
				cl := rpc.NewClient(srv.Addr, secret)
				cl.CallTimeout = 10 * time.Second
				err := cl.Call(proto.OpScrubStart, nil, nil)
				cl.Close()
				if err != nil {
					errs = append(errs, fmt.Errorf("storage server %d (%s): %w", srv.ID, srv.Addr, err))
					continue
				}
				fmt.Printf("storage server %d (%s): scrub started\n", srv.ID, srv.Addr)
			}
			// The parity of erasure-coded files: checked by the metadata
			// leader, which reads every shard of every stripe.
			if err := askLeader(cf, proto.OpECScrub); err != nil {
				errs = append(errs, fmt.Errorf("metadata service: starting the parity check of erasure-coded files: %w", err))
			} else {
				fmt.Println("metadata service: parity check of erasure-coded files started")
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			fmt.Println(`follow it with "tandem status"`)
			return nil
		},
	}
	cf.add(cmd)
	rootCmd.AddCommand(cmd)
}

// askLeader sends op (no body) to whichever metadata replica leads.
func askLeader(cf connectFlags, op uint16) error {
	addr, secret, err := cf.resolve()
	if err != nil {
		return err
	}
	var errs []error
	asked := false
	for _, cl := range metaClients(addr, secret) {
		if !asked {
			err := cl.Call(op, nil, nil)
			asked = err == nil
			errs = append(errs, err)
		}
		cl.Close()
	}
	if asked {
		return nil
	}
	return errors.Join(errs...)
}
