package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"tandemfs/internal/storage"
)

func init() {
	target := &cobra.Command{Use: "target", Short: "Administer storage targets"}
	var cf connectFlags
	var id uint32
	replace := &cobra.Command{
		Use:   "replace --id N DIR",
		Short: "Prepare an empty directory on a new disk to take the place of dead target N",
		Long: `Format the empty directory DIR (on the new disk) as target N, under the
dead target's identity. Then restart N's storage server with DIR in place of
the dead target's directory: the target registers again, rejoins its
replicated chains as syncing, and the heads of those chains copy every chunk
to it while the file system stays online ("tandem status" shows the progress).
Files stored with one copy on the dead disk are lost.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id == 0 {
				return &exitError{2, fmt.Errorf("target replace: give the dead target's --id")}
			}
			st, _, err := cf.clusterStatus()
			if err != nil {
				return err
			}
			for _, t := range st.Map.Targets {
				if t.ID != id {
					continue
				}
				dir, err := filepath.Abs(args[0])
				if err != nil {
					return err
				}
				if err := storage.FormatReplacement(dir, t.UUID, id); err != nil {
					return err
				}
				fmt.Printf("%s is now target %d (uuid %s, was %s on server %d).\n", dir, id, t.UUID, t.Path, t.Server)
				if dir == t.Path {
					fmt.Printf("Restart storage server %d; the target resyncs from the other copies.\n", t.Server)
				} else {
					fmt.Printf("Restart storage server %d with --target %s in place of %s; it resyncs from the other copies.\n", t.Server, dir, t.Path)
				}
				return nil
			}
			return fmt.Errorf("the cluster has no target %d (see tandem status)", id)
		},
	}
	cf.add(replace)
	replace.Flags().Uint32Var(&id, "id", 0, "ID of the dead target (tandem status)")
	target.AddCommand(replace)
	rootCmd.AddCommand(target)
}
