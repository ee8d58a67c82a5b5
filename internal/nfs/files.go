package nfs

import (
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// NFSv3 has no open and close, so the gateway keeps files open between
// requests: an UNSTABLE write goes to the client library's write-behind
// of the file's open handle, and the next COMMIT (or the handle's close
// when it has been idle) makes it durable. The verifier changes when a
// close could not make buffered writes durable, so that clients resend
// them (RFC 1813, section 3.3.7).
const (
	fileIdle     = 10 * time.Second // an unused open file is closed after this
	maxOpenFiles = 4096
)

type openFile struct {
	h      *client.Handle
	stable *client.Handle // opened O_SYNC, for FILE_SYNC and DATA_SYNC writes; nil until one comes
	users  int
	used   time.Time
}

type openFiles struct {
	c    *client.Client
	logf func(string, ...any)

	mu    sync.Mutex
	files map[uint64]*openFile
	verf  [8]byte
	stop  chan struct{}
}

func newOpenFiles(c *client.Client, logf func(string, ...any)) *openFiles {
	o := &openFiles{c: c, logf: logf, files: map[uint64]*openFile{}, verf: newVerifier(), stop: make(chan struct{})}
	go o.closeIdle()
	return o
}

func (o *openFiles) verifier() [8]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.verf
}

// open returns file n open for reading and writing; done must be called
// once the request is finished with it.
func (o *openFiles) open(n *proto.Inode) (*client.Handle, func(), error) {
	return o.openAs(n, false)
}

// openStable returns file n open with O_SYNC: a write through it is
// durable, data, size and mtime, when it returns.
func (o *openFiles) openStable(n *proto.Inode) (*client.Handle, func(), error) {
	return o.openAs(n, true)
}

func (o *openFiles) openAs(n *proto.Inode, stable bool) (*client.Handle, func(), error) {
	o.mu.Lock()
	f, ok := o.files[n.Ino]
	if !ok {
		h, err := o.c.Open(n, syscall.O_RDWR)
		if err != nil {
			o.mu.Unlock()
			return nil, nil, err
		}
		f = &openFile{h: h}
		o.files[n.Ino] = f
	} else {
		o.c.Refresh(n) // what other clients closed since
	}
	h := f.h
	if stable {
		if f.stable == nil {
			sh, err := o.c.Open(n, syscall.O_RDWR|syscall.O_SYNC)
			if err != nil {
				o.mu.Unlock()
				return nil, nil, err
			}
			f.stable = sh
		}
		h = f.stable
	}
	f.users++
	o.mu.Unlock()
	return h, func() {
		o.mu.Lock()
		f.users--
		f.used = time.Now()
		o.mu.Unlock()
	}, nil
}

// forget closes ino's open file if no request uses it: after a remove,
// so that the last link's inode is released.
func (o *openFiles) forget(ino uint64) {
	o.mu.Lock()
	f, ok := o.files[ino]
	if !ok || f.users > 0 {
		o.mu.Unlock()
		return
	}
	delete(o.files, ino)
	o.mu.Unlock()
	o.release(ino, f)
}

// release closes f. Writes it held that cannot be made durable are lost
// to the client unless it resends them: the verifier changes.
func (o *openFiles) release(ino uint64, f *openFile) {
	if f.stable != nil {
		f.stable.Release() // nothing buffered: its writes were durable already
	}
	if err := f.h.Release(); err != nil {
		o.mu.Lock()
		o.verf = newVerifier()
		o.mu.Unlock()
		o.logf("nfs: closing file %d: %v (its unstable writes must be resent: the write verifier changed)", ino, err)
	}
}

func (o *openFiles) closeIdle() {
	t := time.NewTicker(fileIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		for ino, f := range o.takeIdle(time.Now().Add(-fileIdle)) {
			o.release(ino, f)
		}
	}
}

// takeIdle removes from the table the files unused since before, and
// the least recently used beyond maxOpenFiles.
func (o *openFiles) takeIdle(before time.Time) map[uint64]*openFile {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[uint64]*openFile{}
	for ino, f := range o.files {
		if f.users == 0 && f.used.Before(before) {
			out[ino] = f
			delete(o.files, ino)
		}
	}
	for len(o.files) > maxOpenFiles {
		var oldest uint64
		var at time.Time
		for ino, f := range o.files {
			if f.users == 0 && (oldest == 0 || f.used.Before(at)) {
				oldest, at = ino, f.used
			}
		}
		if oldest == 0 {
			break
		}
		out[oldest] = o.files[oldest]
		delete(o.files, oldest)
	}
	return out
}

// closeAll closes every file, making buffered writes durable.
func (o *openFiles) closeAll() {
	close(o.stop)
	o.mu.Lock()
	files := o.files
	o.files = map[uint64]*openFile{}
	o.mu.Unlock()
	for ino, f := range files {
		o.release(ino, f)
	}
}
