package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"
)

// A fault file lets a test (or an administrator rehearsing a failure) make
// the disks of a running storage server fail, the way the failure matrix
// needs: `tandem storage --fault-file F` serves its targets through a
// FaultFS whose faults are the rules in F, reloaded whenever F changes.
// No file, or an empty list, means no faults. Example:
//
//	[{"path": "/srv/t1/chains/", "ops": "write,read", "errno": "EIO", "times": 1}]
//
// path is a substring of the paths to fail ("" for all), ops a comma list
// of open, read, write, sync, truncate, size, mkdir, remove, rename,
// readdir, syncdir, statfs, lock (or "all"), errno EIO or ENOSPC, times how
// many matching calls fail (0: all of them). A rule with a delay (a Go
// duration, "1.5s") makes matching calls wait that long first, a slow disk;
// with a delay, errno may be left out, and the calls then succeed.

// FaultRule is one rule of a fault file.
type FaultRule struct {
	Path  string `json:"path"`
	Ops   string `json:"ops"`
	Errno string `json:"errno"`
	Times int    `json:"times"`
	Delay string `json:"delay"`
}

var opNames = map[string]Op{
	"open": OpOpen, "read": OpRead, "write": OpWrite, "sync": OpSync, "truncate": OpTruncate,
	"size": OpSize, "mkdir": OpMkdir, "remove": OpRemove, "rename": OpRename, "readdir": OpReadDir,
	"syncdir": OpSyncDir, "statfs": OpStatfs, "lock": OpLock, "all": OpAll,
}

var errnoNames = map[string]syscall.Errno{"EIO": syscall.EIO, "ENOSPC": syscall.ENOSPC}

// fault turns the rule into a Fault.
func (r FaultRule) fault() (Fault, error) {
	f := Fault{Path: r.Path, Times: r.Times}
	for _, name := range strings.Split(r.Ops, ",") {
		op, ok := opNames[strings.TrimSpace(name)]
		if !ok {
			return f, fmt.Errorf("unknown operation %q (want %s)", name, "open, read, write, sync, truncate, size, mkdir, remove, rename, readdir, syncdir, statfs, lock or all")
		}
		f.Ops |= op
	}
	if r.Delay != "" {
		d, err := time.ParseDuration(r.Delay)
		if err != nil || d <= 0 {
			return f, fmt.Errorf("delay %q is not a positive duration such as 500ms", r.Delay)
		}
		f.Hook = func(Op, string) { time.Sleep(d) }
		if r.Errno == "" {
			return f, nil // slow, not failing
		}
	}
	errno, ok := errnoNames[r.Errno]
	if !ok {
		return f, fmt.Errorf("unknown errno %q (want EIO or ENOSPC)", r.Errno)
	}
	f.Err = errno
	return f, nil
}

// LoadFaultRules reads a fault file; a missing file has no rules.
func LoadFaultRules(path string) ([]Fault, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rules []FaultRule
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &rules); err != nil {
			return nil, fmt.Errorf("fault file %s: %w", path, err)
		}
	}
	out := make([]Fault, 0, len(rules))
	for i, r := range rules {
		f, err := r.fault()
		if err != nil {
			return nil, fmt.Errorf("fault file %s, rule %d: %w", path, i+1, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// WatchFaultFile applies the rules of path to ffs now and whenever the file
// changes, until stop is closed; logf reports each change.
func WatchFaultFile(ffs *FaultFS, path string, stop <-chan struct{}, logf func(string, ...any)) error {
	apply := func() error {
		faults, err := LoadFaultRules(path)
		if err != nil {
			return err
		}
		ffs.Clear()
		for _, f := range faults {
			ffs.Inject(f)
		}
		logf("storage: fault file %s: %d fault rule(s) in force", path, len(faults))
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	stamp := func() string {
		fi, err := os.Stat(path)
		if err != nil {
			return ""
		}
		return fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
	}
	last := stamp()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if now := stamp(); now != last {
				last = now
				if err := apply(); err != nil {
					logf("storage: %v (keeping the previous rules)", err)
				}
			}
		}
	}()
	return nil
}
