// Package nfsbench measures an NFSv3 server from the client side, the
// same way for TandemFS's gateway and for any other server (NFS-Ganesha
// in docs/benchmarks.md): random 4 KiB reads and stable writes, as an
// O_DIRECT client sends them, and file creates, each by one connection
// and by two at once.
package nfsbench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/nfsclient"
)

// Config says which server and how long each test runs.
type Config struct {
	MountAddr, NFSAddr string // host:port of MOUNT and NFS (may be one)
	Export             string // the path to mount
	Dir                string // a directory under the export for the test files (created)
	FileSize           int64  // of the random I/O file
	Duration           time.Duration
	Jobs               []int    // connections at once, for each test
	Tests              []string // which tests (default all: rand-read-4k, rand-write-4k-stable, create)
	Progress           io.Writer
}

// Result is one test at one number of jobs.
type Result struct {
	Test    string  `json:"test"`
	Jobs    int     `json:"jobs"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"ops_per_second"`
	Errors  int64   `json:"errors"`
}

const block = 4096

// session is one job's connection, with the test directory's handle.
type session struct {
	c   *nfsclient.Conn
	dir []byte
}

func (cfg *Config) open() (*session, error) {
	c, err := nfsclient.Dial(cfg.MountAddr)
	if err != nil {
		return nil, err
	}
	root, err := c.Mount(cfg.Export)
	if err != nil {
		c.Close()
		return nil, err
	}
	if cfg.NFSAddr != cfg.MountAddr {
		c.Close()
		if c, err = nfsclient.Dial(cfg.NFSAddr); err != nil {
			return nil, err
		}
	}
	dir, err := c.Mkdir(root, cfg.Dir)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &session{c: c, dir: dir}, nil
}

func (cfg *Config) say(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// Run runs every test and returns the results.
func Run(cfg Config) ([]Result, error) {
	s, err := cfg.open()
	if err != nil {
		return nil, err
	}
	defer s.c.Close()
	file, err := cfg.prepare(s)
	if err != nil {
		return nil, err
	}
	var out []Result
	tests := []struct {
		name string
		op   func(s *session, job int, rng *rand.Rand, i int64) error
	}{
		{"rand-read-4k", func(s *session, _ int, rng *rand.Rand, _ int64) error {
			buf := make([]byte, block)
			_, err := s.c.Read(file, uint64(rng.Int64N(cfg.FileSize/block))*block, buf)
			return err
		}},
		{"rand-write-4k-stable", func(s *session, _ int, rng *rand.Rand, _ int64) error {
			buf := make([]byte, block)
			buf[0] = byte(rng.Uint32())
			return s.c.Write(file, uint64(rng.Int64N(cfg.FileSize/block))*block, buf, nfsv3.FILE_SYNC)
		}},
		{"create", func(s *session, job int, _ *rand.Rand, i int64) error {
			_, err := s.c.Create(s.dir, fmt.Sprintf("c%d-%d-%d", time.Now().UnixNano()%1e9, job, i))
			return err
		}},
	}
	for _, t := range tests {
		if len(cfg.Tests) > 0 && !slices.Contains(cfg.Tests, t.name) {
			continue
		}
		for _, jobs := range cfg.Jobs {
			r, err := cfg.runTest(t.name, jobs, t.op)
			if err != nil {
				return out, err
			}
			cfg.say("%-22s jobs=%d  %9.0f ops/s  (%d ops in %.1f s, %d errors)", r.Test, r.Jobs, r.PerSec, r.Ops, r.Seconds, r.Errors)
			out = append(out, r)
		}
	}
	return out, nil
}

// prepare writes the random I/O file in 1 MiB pieces and commits it.
func (cfg *Config) prepare(s *session) ([]byte, error) {
	name := "randfile"
	file, err := s.c.Lookup(s.dir, name)
	if err == nil {
		return file, nil
	}
	if file, err = s.c.Create(s.dir, name); err != nil {
		return nil, err
	}
	cfg.say("writing the %d MiB file the random tests use", cfg.FileSize>>20)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < cfg.FileSize; off += int64(len(buf)) {
		for i := range buf {
			buf[i] = byte(off>>20) + byte(i)
		}
		if err := s.c.Write(file, uint64(off), buf, nfsv3.UNSTABLE); err != nil {
			return nil, err
		}
	}
	return file, s.c.Commit(file)
}

// runTest runs op from jobs connections for cfg.Duration.
func (cfg *Config) runTest(name string, jobs int, op func(*session, int, *rand.Rand, int64) error) (Result, error) {
	sessions := make([]*session, jobs)
	for i := range sessions {
		s, err := cfg.open()
		if err != nil {
			return Result{}, err
		}
		defer s.c.Close()
		sessions[i] = s
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	r := Result{Test: name, Jobs: jobs}
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for j, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(j), uint64(start.UnixNano())))
			var ops, errs int64
			for ; time.Now().Before(deadline); ops++ {
				if err := op(s, j, rng, ops); err != nil {
					errs++
				}
			}
			mu.Lock()
			r.Ops += ops
			r.Errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	r.PerSec = float64(r.Ops-r.Errors) / r.Seconds
	return r, nil
}
