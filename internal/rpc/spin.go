package rpc

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Waiting for a reply by polling, briefly, instead of sleeping.
//
// A thread that sleeps until its reply arrives lets its CPU go idle; on a
// virtual machine an idle virtual CPU halts, and waking it for the reply
// is an inter-processor interrupt through the hypervisor. On the 2-core
// VM this was measured on (docs/benchmarks.md, 2026-11-27), a ping-pong
// of 32-byte requests and 4 KiB replies between two Go processes on
// different CPUs ran at 13,500-17,800 round trips/s, at 26-33 µs of the
// client's CPU each; with both on one CPU, 85,000/s; and with the client
// polling its socket for up to 200 µs before sleeping, 116,000-120,000/s
// at 8.3 µs of CPU each: the wake-up costs more CPU than the polling.
//
// So a caller polls its connection for up to spinMax before it sleeps,
// but only for calls of a kind whose replies came within twice spinMax
// of late (replyTimes): a 1 MiB write, or any call on a machine so busy
// that replies come later, sleeps at once and costs no polling. Between
// polls the thread yields its CPU to any other runnable thread, and a
// goroutine yields its Go processor to other goroutines, so a poller
// delays no one for long. Storage servers do not poll for the next
// request: it comes a whole client round trip later, and polling that
// long took the CPU from the servers doing the work (measured: 4,500-4,900
// random 4 KiB writes/s against 6,300-6,700; polling all of a server's
// connections at once, as pollnext.go does, measured again on 2026-11-27:
// random 4 KiB writes 7,615-9,416 against 7,988-8,671/s with one job,
// 9,565-10,727 against 10,595-12,048 with two, sequential writes no
// faster). The metadata service, whose clients wait on it for every
// create, does poll (Server.PollNext).

// spinMax is how long a caller polls for its reply before sleeping;
// TANDEM_RPC_SPIN_US sets it in microseconds (0 turns polling off).
var spinMax = spinFromEnv(os.Getenv("TANDEM_RPC_SPIN_US"))

const defaultSpin = 100 * time.Microsecond

func spinFromEnv(v string) time.Duration {
	if v == "" {
		return defaultSpin
	}
	us, err := strconv.Atoi(v)
	if err != nil || us < 0 {
		return defaultSpin
	}
	return time.Duration(us) * time.Microsecond
}

// callKind groups calls whose replies take alike: the op, and whether it
// moves 64 KiB or more (a 4 KiB and a 1 MiB chunk write are one op).
type callKind uint8

func kindOf(op uint16, bytes int) callKind {
	k := callKind(op%128) << 1
	if bytes >= 64<<10 {
		k |= 1
	}
	return k
}

// replyTimes keeps, per kind of call, a moving average of how long its
// replies took from the end of the request (nanoseconds).
type replyTimes struct {
	avg [256]atomic.Int64
}

// worthSpinning reports whether replies to calls of kind k have of late
// come within twice spinMax. A kind not seen yet is tried.
func (t *replyTimes) worthSpinning(k callKind) bool {
	return spinMax > 0 && time.Duration(t.avg[k].Load()) <= 2*spinMax
}

// record adds a reply that took d to kind k's average (weight 1/8).
func (t *replyTimes) record(k callKind, d time.Duration) {
	a := &t.avg[k]
	old := a.Load()
	a.Store(old + (int64(d)-old)/8) // a lost update only blurs the average
}

// mayPoll reports whether callers may poll: only in a process with more
// than one Go processor. With one (a storage server started by tandem
// up), a poller holds it: the scheduler would not look at the network,
// nor run any other goroutine of a thread held for good, meanwhile, so
// every other connection's requests would wait. And polling there made
// no difference (random 4 KiB writes with two copies: 6,354-7,246/s
// either way, the head's forwards polled for or not).
func mayPoll() bool { return runtime.GOMAXPROCS(0) > 1 }

// spinForReply polls cn for a reply for up to spinMax and reports whether
// one arrived. dedicated says the caller holds its thread for good
// (osthread): other goroutines need not be let run meanwhile.
func (cn *conn) spinForReply(dedicated bool) bool {
	ready := false
	start := time.Now()
	cn.raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if n, err := unix.Poll(fds, 0); n > 0 && err == nil {
				ready = true
				return
			}
			if time.Since(start) > spinMax {
				return
			}
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			if !dedicated {
				runtime.Gosched()
			}
		}
	})
	if ready {
		repliesSpun.Add(1)
	}
	return ready
}

// repliesSpun counts the replies spinForReply saw arrive (for tests).
var repliesSpun atomic.Int64
