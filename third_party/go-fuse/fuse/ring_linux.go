// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// FUSE over io_uring (Linux 6.14 and later, protocol 7.42; the fuse
// module's enable_uring parameter must be on).
//
// After FUSE_INIT has negotiated CAP_OVER_IO_URING, the daemon registers
// ring entries with the kernel: one kernel queue per possible CPU, each
// entry a pair of buffers (the request headers and the payload) handed
// over with an IORING_OP_URING_CMD on the /dev/fuse descriptor. Once
// every queue has an entry, the kernel puts each request into an entry
// of the queue of the CPU the calling task runs on, and completes that
// entry's command. The daemon answers by writing the reply into the
// same buffers and submitting FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which
// hands the reply to the kernel and the entry back for the next request
// in one system call.
//
// Here every entry has its own thread, pinned to its queue's CPU, with
// its own small io_uring: a request is read, served and answered on the
// CPU of the task that made it, and neither the request nor the reply
// wakes a thread on another CPU. (A worker serving bulk data lets go of
// its CPU meanwhile; see ringPin.) (On a virtual machine a wake-up across
// CPUs is an inter-processor interrupt, which can cost more than the
// request itself.) A worker serves one request at a time, inline, so a
// request that blocks holds only its own entry; the others of its queue
// go on. FORGET and INTERRUPT requests, and notifications to the kernel,
// still travel over /dev/fuse, which the classic readers keep serving.

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	sysIoUringSetup = 425
	sysIoUringEnter = 426

	ioringSetupSQE128       = 1 << 10
	ioringSetupSingleIssuer = 1 << 12
	ioringSetupDeferTaskrun = 1 << 13
	ioringEnterGetEvents    = 1
	ioringOpUringCmd        = 46
	ioringOffSQRing         = 0
	ioringOffSQEs           = 0x10000000

	ringSQESize = 128 // IORING_SETUP_SQE128: a fuse_uring_cmd_req is in the command area
	ringCQESize = 16

	fuseIoUringCmdRegister       = 1
	fuseIoUringCmdCommitAndFetch = 2

	// struct fuse_uring_req_header: in_out (the in or out header),
	// op_in (the opcode's argument struct), ring_ent_in_out.
	ringInOutSize   = 128
	ringOpInSize    = 128
	ringEntInOutOff = ringInOutSize + ringOpInSize
	ringPayloadSzAt = ringEntInOutOff + 16 // ring_ent_in_out.payload_sz
	ringHeaderSize  = ringEntInOutOff + 32

	defaultRingWorkers = 4
	// maxRingWorkers bounds the workers of one queue. A queue left with
	// fewer than two workers waiting starts another, so that requests
	// that block for long (a lock waited for) do not hold up one that
	// would end the wait (the holder's close). What a burst faster than
	// workers start leaves queued in the kernel, the queues' watch
	// (ring_stall_linux.go) gets served. A queue whose 128 workers all
	// wait can still stall.
	maxRingWorkers = 128
)

// ioUringParams is struct io_uring_params.
type ioUringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	// sq_off: head, tail, ring_mask, ring_entries, flags, dropped, array, resv1, user_addr (u64)
	sqOff [10]uint32
	// cq_off: head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1, user_addr (u64)
	cqOff [10]uint32
}

// uring is one io_uring instance, used by one thread only.
type uring struct {
	fd      int
	rings   []byte // submission and completion rings (IORING_FEAT_SINGLE_MMAP)
	sqes    []byte
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    int // offset of the completion entries in rings
}

func newUring(entries uint32) (*uring, error) {
	var p ioUringParams
	p.flags = ioringSetupSQE128 | ioringSetupSingleIssuer | ioringSetupDeferTaskrun
	fd, _, errno := syscall.Syscall(sysIoUringSetup, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &uring{fd: int(fd)}
	size := max(int(p.sqOff[6])+int(p.sqEntries)*4, int(p.cqOff[5])+int(p.cqEntries)*ringCQESize)
	var err error
	if r.rings, err = unix.Mmap(r.fd, ioringOffSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		syscall.Close(r.fd)
		return nil, err
	}
	if r.sqes, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*ringSQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		unix.Munmap(r.rings)
		syscall.Close(r.fd)
		return nil, err
	}
	at := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.rings[off])) }
	r.sqTail = at(p.sqOff[1])
	r.sqMask = *at(p.sqOff[2])
	r.sqArray = unsafe.Slice(at(p.sqOff[6]), p.sqEntries)
	r.cqHead = at(p.cqOff[0])
	r.cqTail = at(p.cqOff[1])
	r.cqMask = *at(p.cqOff[2])
	r.cqes = int(p.cqOff[5])
	return r, nil
}

func (r *uring) close() {
	unix.Munmap(r.sqes)
	unix.Munmap(r.rings)
	syscall.Close(r.fd)
}

// pushCmd queues a FUSE uring command for the entry described by iov.
func (r *uring) pushCmd(devFD int, cmdOp uint32, iov *[2]unix.Iovec, commitID uint64, qid uint16) {
	tail := *r.sqTail // this thread is the only submitter
	idx := tail & r.sqMask
	s := r.sqes[idx*ringSQESize : (idx+1)*ringSQESize]
	clear(s)
	s[0] = ioringOpUringCmd
	binary.LittleEndian.PutUint32(s[4:], uint32(devFD))
	binary.LittleEndian.PutUint32(s[8:], cmdOp)
	binary.LittleEndian.PutUint64(s[16:], uint64(uintptr(unsafe.Pointer(iov))))
	binary.LittleEndian.PutUint32(s[24:], 2)
	// struct fuse_uring_cmd_req {flags, commit_id, qid} in the command area.
	binary.LittleEndian.PutUint64(s[56:], commitID)
	binary.LittleEndian.PutUint16(s[64:], qid)
	r.sqArray[idx] = idx
	atomic.StoreUint32(r.sqTail, tail+1)
}

// submit submits the queued command without waiting.
func (r *uring) submit() error {
	for {
		_, _, errno := syscall.Syscall6(sysIoUringEnter, uintptr(r.fd), 1, 0, ioringEnterGetEvents, 0, 0)
		if errno != syscall.EINTR {
			if errno != 0 {
				return errno
			}
			return nil
		}
	}
}

// peek takes the next completion's result, if there is one.
func (r *uring) peek() (int32, bool) {
	head := *r.cqHead
	if head == atomic.LoadUint32(r.cqTail) {
		return 0, false
	}
	c := r.rings[r.cqes+int(head&r.cqMask)*ringCQESize:]
	res := int32(binary.LittleEndian.Uint32(c[8:]))
	atomic.StoreUint32(r.cqHead, head+1)
	return res, true
}

// submitAndWait submits the queued command and waits for a completion,
// whose result it returns.
func (r *uring) submitAndWait() (int32, error) {
	submit := uintptr(1)
	for {
		if res, ok := r.peek(); ok {
			return res, nil
		}
		_, _, errno := syscall.Syscall6(sysIoUringEnter, uintptr(r.fd), submit, 1, ioringEnterGetEvents, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		submit = 0
	}
}

// ringEntry is one registered entry: its buffers and the request state
// that serves it.
type ringEntry struct {
	header [ringHeaderSize]byte
	// buf holds, from inAt on, the request as /dev/fuse would deliver it:
	// its header and argument struct are copied in front of the payload,
	// which the kernel writes at payloadAt.
	buf []byte
	iov [2]unix.Iovec
	req requestAlloc
}

// newRingEntry makes an entry whose payload buffer holds payloadSize
// bytes. Replies are built in that buffer: a handler is given it as the
// place for its reply's payload (requestAlloc.outArea), so a read lands
// where the kernel takes it from instead of in a pool buffer copied there
// after (a copy of every byte read, 8 % of the mount's CPU in 1 MiB
// O_DIRECT reads).
func newRingEntry(payloadSize int) *ringEntry {
	e := &ringEntry{buf: make([]byte, payloadAt+payloadSize)}
	e.req.request.cancel = make(chan struct{})
	e.req.outArea = e.buf[payloadAt:]
	e.iov[0].Base = &e.header[0]
	e.iov[0].SetLen(len(e.header))
	e.iov[1].Base = &e.buf[payloadAt]
	e.iov[1].SetLen(len(e.buf) - payloadAt)
	return e
}

// payloadAt leaves room before the payload for the largest in header and
// argument struct, so that a request is contiguous without moving the
// payload.
const payloadAt = int(unsafe.Sizeof(InHeader{})) + ringOpInSize

func (ms *Server) ringPayloadSize() int {
	// As the kernel sizes it: max(FUSE_MIN_READ_BUFFER, max_write,
	// max_pages * PAGE_SIZE).
	page := syscall.Getpagesize()
	maxPages := (ms.opts.MaxWrite-1)/page + 1
	return max(_FUSE_MIN_READ_BUFFER, ms.opts.MaxWrite, maxPages*page)
}

// startRing starts the ring workers, if the kernel agreed to FUSE over
// io_uring.
func (ms *Server) startRing() {
	if !ms.opts.IoUring || ms.negotiatedFlags&CAP_OVER_IO_URING == 0 {
		return
	}
	cpus := possibleCPUs()
	workers := ms.opts.IoUringWorkers
	if workers <= 0 {
		workers = defaultRingWorkers
	}
	ms.ringWanted.Store(int32(cpus * workers))
	ms.ringQueues = make([]ringQueue, cpus)
	for q := 0; q < cpus; q++ {
		for range workers {
			ms.startRingWorker(q)
		}
	}
	ms.ringDone = make(chan struct{})
	go ms.watchRingQueues(ms.ringDone)
}

// stopRing ends what startRing started beside the workers, which end
// with the connection.
func (ms *Server) stopRing() {
	if ms.ringDone != nil {
		close(ms.ringDone)
	}
}

func (ms *Server) startRingWorker(qid int) {
	ms.ringQueues[qid].workers.Add(1)
	go ms.ringWorker(qid)
}

// IoUring reports whether requests are served over io_uring: every
// queue has registered its entries.
func (ms *Server) IoUring() bool {
	return ms.ringRegistered.Load() >= ms.ringWanted.Load() && ms.ringWanted.Load() > 0
}

// possibleCPUs is the kernel's number of queues, num_possible_cpus(): the
// highest CPU number in /sys/devices/system/cpu/possible ("0-3,8") + 1.
func possibleCPUs() int {
	data, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(data)), ",") {
		_, hi, _ := strings.Cut(part, "-")
		if hi == "" {
			hi = part
		}
		v, err := strconv.Atoi(hi)
		if err != nil {
			return runtime.NumCPU()
		}
		n = max(n, v+1)
	}
	if n == 0 {
		return runtime.NumCPU()
	}
	return n
}

func (ms *Server) ringWorker(qid int) {
	// The thread is this worker's for its whole life, and so is its CPU
	// affinity (ringPin): it is never given back to the Go scheduler
	// (the goroutine exits locked).
	runtime.LockOSThread()
	pin := newRingPin(qid)
	pin.small()
	if f := ms.opts.OnIoUringWorker; f != nil {
		defer f()()
	}

	// A descriptor of its own: the commands hold the file, and the
	// server may close its descriptor at unmount meanwhile.
	fd, err := -1, error(nil)
	if cerr := ms.fuseFD.withFD(func(dev int) { fd, err = syscall.Dup(dev) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		ms.opts.Logger.Printf("io_uring queue %d: %v", qid, err)
		return
	}
	defer syscall.Close(fd)
	r, err := newUring(2)
	if err != nil {
		ms.opts.Logger.Printf("io_uring queue %d: setup: %v", qid, err)
		return
	}
	defer r.close()

	e := newRingEntry(ms.ringPayloadSize())

	// A registration the kernel refuses completes at once with the
	// error; one it takes completes only with the first request.
	r.pushCmd(fd, fuseIoUringCmdRegister, &e.iov, 0, uint16(qid))
	if err := r.submit(); err != nil {
		ms.opts.Logger.Printf("io_uring queue %d: register: %v", qid, err)
		return
	}
	if res, ok := r.peek(); ok && res < 0 {
		ms.opts.Logger.Printf("io_uring queue %d: register: %v", qid, syscall.Errno(-res))
		return
	}
	if ms.ringRegistered.Add(1) == ms.ringWanted.Load() {
		// Requests that came while the queues registered may sit in
		// a queue that had no entry waiting then, and the kernel hands
		// them only to an entry that commits a reply: a request to
		// every queue (ring_stall_linux.go) makes one commit. Seen:
		// the mount's stat of its own mount point, never answered.
		ms.pumpEveryRingQueue()
	}
	q := &ms.ringQueues[qid]
	serving := q.servingSlot()
	for {
		q.idle.Add(1)
		res, err := r.submitAndWait()
		// Keep a spare waiting: the kernel hands a request that finds
		// no entry waiting only to an entry that commits a reply later,
		// never to one registered later.
		if q.idle.Add(-1) <= 1 && res >= 0 && err == nil && q.workers.Load() < maxRingWorkers {
			ms.startRingWorker(qid)
		}
		if err != nil {
			ms.opts.Logger.Printf("io_uring queue %d: %v", qid, err)
			return
		}
		if res < 0 {
			// ENOTCONN, ECANCELED: the file system was unmounted.
			if errno := syscall.Errno(-res); errno != syscall.ENOTCONN && errno != syscall.ECANCELED && errno != syscall.ENODEV {
				ms.opts.Logger.Printf("io_uring queue %d: %v", qid, errno)
			}
			return
		}
		if ringBulk(e) {
			pin.bulk()
		} else {
			pin.small()
		}
		serving.Store((*InHeader)(unsafe.Pointer(&e.header[0])).Unique)
		unique := ms.serveRingEntry(e)
		serving.Store(0)
		q.commits.Add(1)
		r.pushCmd(fd, fuseIoUringCmdCommitAndFetch, &e.iov, unique, uint16(qid))
		runtime.KeepAlive(e)
	}
}

// serveRingEntry serves the request in e and writes the reply into e. It
// returns the request's unique ID, which commits the reply.
func (ms *Server) serveRingEntry(e *ringEntry) uint64 {
	inHdr := (*InHeader)(unsafe.Pointer(&e.header[0]))
	unique := inHdr.Unique
	payloadSize := int(binary.LittleEndian.Uint32(e.header[ringPayloadSzAt:]))
	hdrSize := int(unsafe.Sizeof(InHeader{}))
	argSize := int(inHdr.Length) - hdrSize - payloadSize
	if argSize < 0 || argSize > ringOpInSize || payloadSize > len(e.buf)-payloadAt {
		ms.opts.Logger.Printf("io_uring: malformed request %d: length %d, payload %d", unique, inHdr.Length, payloadSize)
		ms.ringReply(e, unique, EIO, nil, nil)
		return unique
	}
	inAt := payloadAt - argSize - hdrSize
	copy(e.buf[inAt:], e.header[:hdrSize])
	copy(e.buf[inAt+hdrSize:], e.header[ringInOutSize:ringInOutSize+argSize])

	req := &e.req
	req.inputBuf = e.buf[inAt : payloadAt+payloadSize]
	if ms.opts.SingleThreaded {
		ms.requestProcessingMu.Lock()
		defer ms.requestProcessingMu.Unlock()
	}
	ms.serve(req)

	status := Status(-req.outHeader().Status)
	data, payload := req.outDataBuf, req.outPayload
	if req.readResult != nil {
		if ws, ok := req.readResult.(withSlice); ok && status.Ok() {
			slices, st := ws.Slices()
			status, payload = st, nil
			n := copyInto(e.buf[payloadAt:], data)
			for _, s := range slices {
				n += copyInto(e.buf[payloadAt+n:], s)
			}
			data = e.buf[payloadAt : payloadAt+n]
		} else if status.Ok() {
			payload, status = req.readResult.Bytes(req.outPayload)
		}
		req.readResult.Done()
		req.readResult = nil
	}
	ms.ringReply(e, unique, status, data, payload)
	req.reset(&ms.buffers)
	return unique
}

// ringReply writes a reply into e: the out header into the headers'
// in_out area, the argument struct and data after each other into the
// payload buffer.
func (ms *Server) ringReply(e *ringEntry, unique uint64, status Status, data, payload []byte) {
	n := 0
	if status.Ok() {
		n = copyInto(e.buf[payloadAt:], data)
		n += copyInto(e.buf[payloadAt+n:], payload)
	}
	out := (*OutHeader)(unsafe.Pointer(&e.header[0]))
	*out = OutHeader{Length: uint32(int(sizeOfOutHeader) + n), Status: -int32(status), Unique: unique}
	binary.LittleEndian.PutUint32(e.header[ringPayloadSzAt:], uint32(n))
}

// copyInto copies src to the start of dst, unless it is there already: a
// handler given the ring's payload buffer (requestAlloc.outArea) wrote its
// reply in place.
func copyInto(dst, src []byte) int {
	if len(src) > 0 && len(dst) > 0 && &dst[0] == &src[0] {
		return min(len(dst), len(src))
	}
	return copy(dst, src)
}

// ringBulkSize is the payload from which a request counts as bulk data.
const ringBulkSize = 64 << 10

// ringBulk reports whether the request in e moves bulk data: a read or
// write of at least ringBulkSize.
func ringBulk(e *ringEntry) bool {
	h := (*InHeader)(unsafe.Pointer(&e.header[0]))
	switch h.Opcode {
	case _OP_READ:
		// op_in holds struct fuse_read_in: fh, offset, size (go-fuse's
		// ReadIn begins with the InHeader, which op_in lacks).
		return binary.LittleEndian.Uint32(e.header[ringInOutSize+16:]) >= ringBulkSize
	case _OP_WRITE:
		return binary.LittleEndian.Uint32(e.header[ringPayloadSzAt:]) >= ringBulkSize
	}
	return false
}

// ringPin keeps a worker on its queue's CPU while it serves small
// requests, whose cost is the round trip, and lets it run on any CPU
// while it serves bulk data, whose cost is copying: the kernel copies a
// read's data into the page cache when the reply is committed, and on
// the caller's CPU that copy competes with the caller (measured: fio
// reading 256 MiB with POSIX_FADV_SEQUENTIAL, two 1 MiB requests in
// flight, ran at 570-650 MB/s pinned, 960-1,060 over /dev/fuse). The
// affinity changes only when the kind of request does.
type ringPin struct {
	cpu    unix.CPUSet
	all    unix.CPUSet
	pinned int // 1 pinned, -1 free, 0 not set yet
}

func newRingPin(qid int) *ringPin {
	p := &ringPin{}
	p.cpu.Set(qid)
	if unix.SchedGetaffinity(0, &p.all) != nil {
		p.all = p.cpu
	}
	return p
}

func (p *ringPin) small() {
	if p.pinned != 1 {
		p.pinned = 1
		unix.SchedSetaffinity(0, &p.cpu) // an offline CPU: stays free
	}
}

func (p *ringPin) bulk() {
	if p.pinned != -1 {
		p.pinned = -1
		unix.SchedSetaffinity(0, &p.all)
	}
}
