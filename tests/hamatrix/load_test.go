package hamatrix

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"tandemfs/internal/stream"
)

// loadSize is the size of each stream the load writes, and of the stream
// it reads back; the load repeats them until it is stopped.
type loadSize struct {
	write string // `tandem stream gen --size` of each written file
	read  string // size of the "pre" stream read back
}

// load is the client load of a scenario, all of it on cli: writers that
// pipe `tandem stream gen` into dd (bs=1M, conv=fsync) on the mount, file
// after file, and a reader that copies a stream written before the
// scenario out of the mount with dd, again and again. Every copy written
// to the mount is checked with `tandem stream check` afterwards; each copy
// read out is checked as it is read, dd piping it into `tandem stream
// check -`. The papers' clients copy out to their own disks; here that
// disk would be the servers' one, and a reader copying the stream from
// the kernel's page cache wrote it there faster than any resync could
// copy (a resync under this load copied 381-413 MB/s with the copies
// written to that disk, 657-760 with them sent to /dev/null instead).
// The reader drops each page it read from the kernel's cache (dd
// iflag=nocache), so every copy after the first (which may find the pages
// writing the stream left) comes from the servers, through the failover,
// as a client's does when the file is not in its cache. Before,
// the 256 MiB stream stayed in the kernel's cache, was read at memory
// speed and never reached a server during a failure. (A reader with
// O_DIRECT, one 1 MiB request at a time, was tried too: it read a tenth
// as much, which left the resync more CPU; docs/ha.md.)
type load struct {
	c       *cluster
	stopNew chan struct{}      // closed: start no new copy
	kill    context.CancelFunc // kills copies in flight (test cleanup)
	ctx     context.Context
	wg      sync.WaitGroup

	mu      sync.Mutex
	copies  []string // finished copies, to check
	read    readCopies
	errs    []error
	longest time.Duration // the slowest copy
}

// readCopies counts the copies read out of the mount and checked as
// they were read: n passed (bytes in all), failed did not (their errors
// are the load's).
type readCopies struct {
	n, failed int
	bytes     int64
}

// aCopy is one copy the load makes: argv makes it; out is the file it
// writes, to check afterwards, or, when checked is set, a name for the
// copy that argv checks itself as it reads bytes bytes.
type aCopy struct {
	out     string
	argv    []string
	checked bool
	bytes   int64
}

const loadWriters = 2

// preSeed is the seed of the stream written before the load.
const preSeed stream.Seed = 1

// writePre writes the stream the reader copies, before the load starts.
func writePre(c *cluster, size string) string {
	c.t.Helper()
	pre := filepath.Join(c.mnt, "pre")
	if out, err := c.host("cli").Run(c.bin, "stream", "gen", "--size", size, "--seed", fmt.Sprint(uint64(preSeed)), "--fsync", "-o", pre); err != nil {
		c.t.Fatalf("writing %s: %v\n%s", pre, err, out)
	}
	return pre
}

// startLoad starts the writers and the reader.
func startLoad(c *cluster, size loadSize) *load {
	ctx, kill := context.WithCancel(context.Background())
	l := &load{c: c, stopNew: make(chan struct{}), kill: kill, ctx: ctx}
	cleanup(c.t, "stopping the load", func() { l.kill(); l.wg.Wait() })
	for w := 1; w <= loadWriters; w++ {
		l.loop(func(i int) aCopy {
			out := filepath.Join(c.mnt, fmt.Sprintf("w%d-%d", w, i))
			seed := strconv.Itoa(1000*w + i)
			return aCopy{out: out, argv: []string{"bash", "-c", `set -o pipefail; "$0" stream gen --size "$1" --seed "$2" | dd of="$3" bs=1M conv=fsync status=none`,
				c.bin, size.write, seed, out}}
		})
	}
	pre := filepath.Join(c.mnt, "pre")
	fi, err := os.Stat(pre)
	if err != nil {
		c.t.Fatalf("the stream the reader copies: %v", err)
	}
	l.loop(func(i int) aCopy {
		return aCopy{out: fmt.Sprintf("copy %d of %s read out", i, pre), checked: true, bytes: fi.Size(),
			argv: []string{"bash", "-c", `set -o pipefail; dd if="$0" iflag=nocache bs=1M status=none | "$1" stream check - --seed "$2" --size "$3"`,
				pre, c.bin, strconv.FormatUint(uint64(preSeed), 10), strconv.FormatInt(fi.Size(), 10)}}
	})
	return l
}

// loop runs copies made by next, one after the other, until stopped.
func (l *load) loop(next func(i int) aCopy) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for i := 1; ; i++ {
			select {
			case <-l.stopNew:
				return
			default:
			}
			cp := next(i)
			t0 := time.Now()
			res, err := l.c.host("cli").RunContext(l.ctx, cp.argv...)
			took := time.Since(t0)
			l.mu.Lock()
			switch {
			case err != nil:
				l.errs = append(l.errs, fmt.Errorf("%s after %v: %v: %s", cp.out, took.Round(time.Millisecond), err, strings.TrimSpace(string(res))))
				if cp.checked {
					l.read.failed++
				}
			case cp.checked:
				l.read.n++
				l.read.bytes += cp.bytes
			default:
				l.copies = append(l.copies, cp.out)
			}
			l.longest = max(l.longest, took)
			l.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
}

// written is how many bytes the load's writers had written to the mount
// at a moment, as the sizes of their files there say.
type written struct {
	at    time.Time
	bytes int64
}

// written sums the sizes of the writers' files, finished or not.
func (l *load) written() written {
	w := written{at: time.Now()}
	files, _ := filepath.Glob(filepath.Join(l.c.mnt, "w[0-9]*-[0-9]*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			w.bytes += fi.Size()
		}
	}
	return w
}

// rateSince is the rate in MB/s at which the load wrote from then to w.
func (w written) rateSince(then written) float64 {
	if d := w.at.Sub(then.at).Seconds(); d > 0 {
		return float64(w.bytes-then.bytes) / 1e6 / d
	}
	return 0
}

// stop lets the copies in flight finish and starts no more; it returns
// false if they do not finish within timeout.
func (l *load) stop(timeout time.Duration) bool {
	close(l.stopNew)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// result returns the finished copies still to check, the count of those
// checked as they were read, and the errors of failed ones.
func (l *load) result() (copies []string, read readCopies, errs []error, longest time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.copies...), l.read, append([]error(nil), l.errs...), l.longest
}

// checkStreams runs `tandem stream check` over each file and returns a
// summary and the files that failed with their reports.
func checkStreams(c *cluster, files []string) (checked int, bytes int64, failed []string) {
	for _, f := range files {
		out, err := exec.Command(c.bin, "stream", "check", f).CombinedOutput()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v:\n%s", f, err, out))
			continue
		}
		checked++
		if fi, err := os.Stat(f); err == nil {
			bytes += fi.Size()
		}
	}
	return checked, bytes, failed
}
