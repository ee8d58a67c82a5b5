package client

import (
	"sync"
	"time"

	"tandemfs/internal/proto"
)

// attrTTL is how long an inode learnt from a metadata reply answers
// getattr and open on this client. It is the kernel's own attribute
// timeout, so the cache makes nothing staler than the kernel already
// does; what it saves is the round trip the kernel makes for a directory
// right after this client changed it (every create and unlink), and the
// fresh getattr of open() right after the lookup that found the file.
const attrTTL = time.Second

// attrCacheMax bounds the cache; when full it is simply emptied.
const attrCacheMax = 1 << 17

type cachedInode struct {
	n  proto.Inode
	at time.Time
}

type attrCache struct {
	mu sync.Mutex
	m  map[uint64]cachedInode
}

func (a *attrCache) put(n *proto.Inode) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= attrCacheMax {
		a.m = make(map[uint64]cachedInode)
	}
	a.m[n.Ino] = cachedInode{n: *n, at: time.Now()}
}

func (a *attrCache) get(ino uint64) (proto.Inode, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[ino]
	if !ok || time.Since(e.at) > attrTTL {
		return proto.Inode{}, false
	}
	return e.n, true
}

func (a *attrCache) drop(ino uint64) {
	a.mu.Lock()
	delete(a.m, ino)
	a.mu.Unlock()
}
