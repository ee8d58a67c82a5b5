package client

import (
	"sync"
	"sync/atomic"
	"time"

	"tandemfs/internal/proto"
)

// The kernel's page cache of a file across opens. By default the kernel
// drops a FUSE file's cached pages at every open, so a file read again
// (a header every compiler run includes, an input deck every job step
// reads, a dataset read once per epoch) crosses the client each time.
// An open may tell the kernel to keep them (FOPEN_KEEP_CACHE) when this
// client can vouch that the file did not change since the kernel cached
// them:
//   - it holds a file lease on the file (fileleases.go), so every change
//     another session makes is seen on its watch before that change is
//     answered, and the watch drops the kernel's pages of the file
//     (watch.go, pass);
//   - the inode's version, the log index of its last change, is the one
//     noted at the previous open through this client: a change committed
//     while no lease was held (the watch was lost, the lease ran out)
//     moved it on. Every close, fsync, truncate or lock release of a
//     writer commits, so any change a reader must see after it moves
//     the version;
//   - no write of this client to the file failed since then: the kernel
//     may hold bytes of a write the storage servers never took.
// Writes through this mount keep the kernel's pages as they are (the
// kernel wrote them); their commit moves the version, so the next open
// drops the pages once, and the opens after it keep them again.

// maxPageVersions bounds the versions remembered; when it is reached they
// are all forgotten, which costs each file one more read from the client.
const maxPageVersions = 1 << 17

// pageVersions is the inode version noted at the last open of each file.
type pageVersions struct {
	mu   sync.Mutex
	seen map[uint64]uint64
	kept atomic.Uint64 // opens that kept the kernel's pages
}

// keep notes version as the one the kernel's pages of ino are read from
// now on, and reports whether the pages it already holds may stay: the
// version is the one noted before, and leased says no change could have
// slipped by unseen.
func (p *pageVersions) keep(ino, version uint64, leased bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.seen[ino]
	if p.seen == nil || !ok && len(p.seen) >= maxPageVersions {
		p.seen = map[uint64]uint64{}
	}
	p.seen[ino] = version
	if ok && old == version && leased {
		p.kept.Add(1)
		return true
	}
	return false
}

// forget makes the next open of ino drop the kernel's pages.
func (p *pageVersions) forget(ino uint64) {
	p.mu.Lock()
	delete(p.seen, ino)
	p.mu.Unlock()
}

// KeepKernelPages decides, at an open of n (as OpenAttr returned it),
// whether the kernel may keep the pages of the file it caches.
func (c *Client) KeepKernelPages(n *proto.Inode) bool {
	_, leased := c.fileLeases.valid(n.Ino, time.Now())
	return c.pages.keep(n.Ino, n.Version, leased)
}

// OpensKeptPages counts the opens that let the kernel keep its pages.
func (c *Client) OpensKeptPages() uint64 { return c.pages.kept.Load() }
