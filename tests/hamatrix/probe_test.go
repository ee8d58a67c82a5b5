package hamatrix

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tandemfs/internal/netlab"
	"tandemfs/internal/stream"
)

// Client stalls are measured by probes: small operations on the mount,
// one every probeEvery, each timed. A probe is this test binary started
// again on cli in probe mode (see TestMain), never a goroutine of the test
// process: a process that holds a file of the mount open cannot start
// another while the file's writes are stuck, because exec closes the
// descriptor in the child and the kernel sends FUSE a flush, which waits
// for them. The test process keeps no file of the mount open, so it can
// poll the status and start the load whatever the cluster does.
//
// A probe writes one line per event to its log:
//
//	ready
//	begin <op> <unix ns>
//	end <op> <unix ns> ok | end <op> <unix ns> error <message>
//	verify ok | verify error <message>

// Environment of a probe process.
const (
	probeEnv     = "HAMATRIX_PROBE"      // write, read or once
	probeFileEnv = "HAMATRIX_PROBE_FILE" // the file on the mount
	probeStopEnv = "HAMATRIX_PROBE_STOP" // a local file whose existence stops the probe
)

const probeEvery = 50 * time.Millisecond

// Probe file geometry: 4 KiB blocks over the first 4 chunks (1 MiB each
// by default) of a file, so that the writes reach every chain.
const (
	probeBlock  = 4096
	probeChunks = 4
	probeChunk  = 1 << 20
)

// probe is a running probe process.
type probe struct {
	name     string
	proc     *netlab.Proc
	log      string
	stopFile string
}

// startProbe starts a probe on cli and waits until it runs. Modes:
//
//	write  writes and fsyncs 4 KiB each time, rotating over the chunks of
//	       file (written in full first, so it is not inline); verifies
//	       the file when stopped
//	read   opens file (a stream of seed preSeed; a new open drops the
//	       kernel's cached pages), reads 4 KiB at an offset that moves on
//	       by 257 blocks, compares it with the stream, closes it
//	once   writes probeChunks MiB to a new file with fsync, once, then
//	       verifies it
func startProbe(c *cluster, name, mode, file string) *probe {
	c.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	base := filepath.Join(c.dir, "logs", "probe-"+filepath.Base(file))
	p := &probe{name: name, log: base + ".log", stopFile: base + ".stop"}
	p.proc, err = c.host("cli").Start("probe "+name, p.log, "env",
		probeEnv+"="+mode, probeFileEnv+"="+file, probeStopEnv+"="+p.stopFile, exe)
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(upTimeout)
	for {
		data, _ := os.ReadFile(p.log)
		if bytes.HasPrefix(data, []byte("ready\n")) {
			return p
		}
		if p.proc.Exited() || time.Now().After(deadline) {
			c.t.Fatalf("probe %s does not start; log:\n%s", name, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probeLog is what a probe's log says so far.
type probeLog struct {
	ops      int           // operations completed
	longest  time.Duration // the longest, counting one still in flight
	at       time.Time     // when it started
	pending  bool          // an operation is in flight
	err      error         // the first failed operation
	verified error         // the verification's result, once done
	verifyOK bool
}

func (p *probe) read() probeLog {
	var pl probeLog
	f, err := os.Open(p.log)
	if err != nil {
		pl.err = err
		return pl
	}
	defer f.Close()
	var begin time.Time
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		switch fields[0] {
		case "begin", "end":
			if len(fields) < 3 {
				continue
			}
			ns, _ := strconv.ParseInt(fields[2], 10, 64)
			t := time.Unix(0, ns)
			if fields[0] == "begin" {
				begin, pl.pending = t, true
				continue
			}
			pl.pending = false
			pl.ops++
			if d := t.Sub(begin); d > pl.longest {
				pl.longest, pl.at = d, begin
			}
			if len(fields) > 3 && strings.HasPrefix(fields[3], "error") && pl.err == nil {
				pl.err = errors.New(fields[3])
			}
		case "verify":
			if len(fields) > 1 && fields[1] == "ok" {
				pl.verifyOK = true
			} else {
				pl.verified = errors.New(strings.Join(fields[1:], " "))
			}
		}
	}
	if pl.pending {
		if d := time.Since(begin); d > pl.longest {
			pl.longest, pl.at = d, begin
		}
	}
	return pl
}

// finish stops the probe, waits up to timeout for it to exit, and
// returns what its log says.
func (p *probe) finish(timeout time.Duration) (probeLog, error) {
	if err := os.WriteFile(p.stopFile, nil, 0o644); err != nil {
		return probeLog{}, err
	}
	err := p.proc.Wait(timeout)
	if errors.Is(err, netlab.ErrTimeout) {
		return p.read(), fmt.Errorf("probe %s still blocked %v after it was told to stop", p.name, timeout)
	}
	pl := p.read()
	if !pl.verifyOK && pl.verified == nil {
		return pl, fmt.Errorf("probe %s exited (%v) without verifying its file", p.name, err)
	}
	return pl, pl.verified
}

// probeMain is the probe process: it returns the exit status.
func probeMain(mode string) int {
	file, stop := os.Getenv(probeFileEnv), os.Getenv(probeStopEnv)
	var err error
	switch mode {
	case "write":
		err = writeProbe(file, stop)
	case "read":
		err = readProbe(file, stop)
	case "once":
		err = onceProbe(file)
	default:
		err = fmt.Errorf("unknown probe mode %q", mode)
	}
	if err != nil {
		fmt.Println("probe failed:", err)
		return 1
	}
	return 0
}

// runProbeOps times op every probeEvery until the stop file exists.
func runProbeOps(stop string, op func(i int) error) error {
	fmt.Println("ready")
	for i := 0; ; i++ {
		if _, err := os.Stat(stop); err == nil {
			return nil
		}
		time.Sleep(probeEvery)
		if err := timed(i, func() error { return op(i) }); err != nil {
			return err
		}
	}
}

// timed runs one operation between a begin and an end line.
func timed(i int, op func() error) error {
	fmt.Printf("begin %d %d\n", i, time.Now().UnixNano())
	err := op()
	if err != nil {
		fmt.Printf("end %d %d error %v\n", i, time.Now().UnixNano(), err)
		return err
	}
	fmt.Printf("end %d %d ok\n", i, time.Now().UnixNano())
	return nil
}

func writeProbe(path, stop string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	want := make([]byte, probeChunks*probeChunk)
	for off := 0; off < len(want); off += probeBlock {
		fillProbeBlock(want[off:off+probeBlock], -1, off)
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	err = runProbeOps(stop, func(i int) error {
		off := probeOffset(i)
		block := want[off : off+probeBlock]
		fillProbeBlock(block, i, off)
		if _, err := f.WriteAt(block, int64(off)); err != nil {
			return err
		}
		return f.Sync()
	})
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return verify(path, want)
}

// verify compares the file with want and prints the verdict.
func verify(path string, want []byte) error {
	got, err := os.ReadFile(path)
	switch {
	case err != nil:
	case len(got) != len(want):
		err = fmt.Errorf("%s is %d bytes, want %d", path, len(got), len(want))
	default:
		for off := 0; off < len(want); off += probeBlock {
			if !bytes.Equal(got[off:off+probeBlock], want[off:off+probeBlock]) {
				err = fmt.Errorf("%s differs at offset %d: %q", path, off, got[off:off+32])
				break
			}
		}
	}
	if err != nil {
		fmt.Println("verify error", err)
		return nil
	}
	fmt.Println("verify ok")
	return nil
}

// probeOffset rotates over the chunks first, then over the blocks.
func probeOffset(i int) int {
	return (i%probeChunks)*probeChunk + (i/probeChunks)%(probeChunk/probeBlock)*probeBlock
}

// fillProbeBlock fills one block with text naming the write and offset,
// so that a misplaced or lost write shows in the contents.
func fillProbeBlock(b []byte, i, off int) {
	line := fmt.Sprintf("probe write %d at offset %d\n", i, off)
	for n := 0; n < len(b); n += copy(b[n:], line) {
	}
}

func readProbe(path, stop string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	gen := stream.NewGenerator(preSeed, fi.Size())
	blocks := int(fi.Size() / probeBlock)
	got, want := make([]byte, probeBlock), make([]byte, probeBlock)
	err = runProbeOps(stop, func(i int) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		// Steps of 257 blocks: a new chunk (and chain) each time.
		off := int64((i*257)%blocks) * probeBlock
		if _, err := f.ReadAt(got, off); err != nil {
			return fmt.Errorf("reading at %d: %w", off, err)
		}
		if _, err := gen.ReadAt(want, off); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("the 4 KiB at %d differ from the stream", off)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Println("verify ok") // every read was compared
	return nil
}

func onceProbe(path string) error {
	data := make([]byte, probeChunks*probeChunk)
	for off := 0; off < len(data); off += probeBlock {
		fillProbeBlock(data[off:off+probeBlock], 0, off)
	}
	fmt.Println("ready")
	if err := timed(0, func() error { return writeFileSync(path, data) }); err != nil {
		return err
	}
	return verify(path, data)
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
