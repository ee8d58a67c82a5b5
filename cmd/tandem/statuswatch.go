package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"tandemfs/internal/rpc"
)

// watchLine is one round of `tandem status --watch --json`: the status as
// `tandem status --json` prints it plus the time the leader answered, or
// the error of a round that found no leader (and the time it was asked).
type watchLine struct {
	Time string `json:"time"`
	*statusJSON
	Error string `json:"error,omitempty"`
}

// watchStatus shows the status every interval until ctx ends, SIGINT or
// SIGTERM arrives, or count rounds were shown (count 0: no limit). A round
// that finds no leader is shown as an error and the watch goes on: an
// administrator watches precisely while things fail. The clients stay
// connected between rounds.
func watchStatus(ctx context.Context, cls []*rpc.Client, interval time.Duration, count int, asJSON bool) error {
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	redraw := !asJSON && isTerminal(os.Stdout)
	// A round may take up to the interval, but at least long enough for a
	// loaded leader to answer.
	timeout := max(interval, 2*time.Second)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for round := 1; ; round++ {
		start := time.Now()
		st, reps, at, err := askRound(ctx, cls, timeout)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			at = start
		}
		line := watchLine{Time: at.UTC().Format(time.RFC3339Nano)}
		if err != nil {
			line.Error = err.Error()
		} else {
			line.statusJSON = statusToJSON(st, reps)
		}
		if err := showRound(&line, interval, asJSON, redraw); err != nil {
			return err // stdout closed: nobody is watching
		}
		if count > 0 && round >= count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// showRound prints one round: a line of JSON, or the table under a header
// with the time (on a terminal, after clearing the screen, as watch(1)).
// An error means stdout is closed.
func showRound(line *watchLine, interval time.Duration, asJSON, redraw bool) error {
	w := os.Stdout
	if asJSON {
		return json.NewEncoder(w).Encode(line)
	}
	if redraw {
		fmt.Fprint(w, "\033[H\033[2J")
	}
	_, err := fmt.Fprintf(w, "every %v: %s\n", interval, line.Time)
	if err != nil {
		return err
	}
	if line.Error != "" {
		_, err = fmt.Fprintf(w, "no status: %s\n", line.Error)
	} else {
		printStatus(line.statusJSON)
	}
	if !redraw {
		fmt.Fprintln(w)
	}
	return err
}

// isTerminal reports whether f is a terminal (a character device), where
// redrawing the screen makes sense.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
