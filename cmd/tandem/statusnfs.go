package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"tandemfs/internal/proto"
)

// nfsJSON is the NFS gateway in `tandem status --json`: the first service
// address's holder and heads at the top (a gateway has one address
// usually), every address under services.
type nfsJSON struct {
	nfsServiceJSON
	Services []nfsServiceJSON `json:"services"`
}

type nfsServiceJSON struct {
	Address string        `json:"address"` // host:port clients mount
	Active  string        `json:"active"`  // the head serving it; "" while none does
	Epoch   uint64        `json:"epoch"`   // how many times it was granted anew
	Heads   []nfsHeadJSON `json:"heads"`
}

type nfsHeadJSON struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	State    string `json:"state"` // active, standby, or silent (not heard for a while)
	LastSeen string `json:"last_seen"`
}

// headSilentAfter: a head not heard from for this long is shown silent
// (heads ask every half second or so).
const headSilentAfter = 3 * time.Second

func nfsStatusJSON(svcs []proto.NFSService, now time.Time) *nfsJSON {
	if len(svcs) == 0 {
		return nil
	}
	var j nfsJSON
	for _, s := range svcs {
		sj := nfsServiceJSON{Address: s.Address, Active: s.Active, Epoch: s.Epoch, Heads: []nfsHeadJSON{}}
		for _, h := range s.Heads {
			seen := time.UnixMilli(h.LastSeenMs)
			state := "standby"
			switch {
			case h.ID == s.Active:
				state = "active"
			case now.Sub(seen) > headSilentAfter:
				state = "silent"
			}
			sj.Heads = append(sj.Heads, nfsHeadJSON{ID: h.ID, Addr: h.Addr, State: state, LastSeen: seen.UTC().Format(time.RFC3339Nano)})
		}
		j.Services = append(j.Services, sj)
	}
	j.nfsServiceJSON = j.Services[0]
	return &j
}

// printNFS shows each service address, who serves it, and the heads.
func printNFS(j *nfsJSON) {
	if j == nil {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NFS ADDRESS\tACTIVE\tHEAD\tSTATE\tREACHED AT")
	for _, s := range j.Services {
		active := s.Active
		if active == "" {
			active = "(none)"
		}
		for i, h := range s.Heads {
			addr, act := s.Address, active
			if i > 0 {
				addr, act = "", ""
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", addr, act, h.ID, h.State, h.Addr)
		}
		if len(s.Heads) == 0 {
			fmt.Fprintf(w, "%s\t%s\t\t\t\n", s.Address, active)
		}
	}
	w.Flush()
}
