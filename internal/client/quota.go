package client

import (
	"math"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/wire"
)

// Quotas (internal/meta/quota.go). The metadata service checks inode
// limits at every create and byte limits at writes of inline files; bytes
// written to chunks go from this client straight to the storage servers,
// so the client checks those: a write that grows a file is refused with
// EDQUOT while the file's owner, group or project is over its byte limit.
//
// The client learns the usage and limits of the quotas that have limits
// from the metadata leader, asked for at most once per quotaRefresh while
// it writes. A file charged to a quota with a byte limit reports its
// growth (its writes flushed, then its size committed) as soon as the
// growth since its last report reaches the room the client knew was left
// under the limit, or quotaReportEvery bytes; the client then asks for the
// limits again, and refuses the next write. So one writer overshoots a
// hard limit by at most its last write (up to 1 MiB through the kernel).
// Writers on several clients at once can each use the room their client
// last learnt of before the others' reports reach it, at most
// quotaRefresh later: together they may overshoot by up to that room times
// the number of other clients writing.

const (
	quotaRefresh      = time.Second
	quotaReportEvery  = 64 << 20
	quotaFetchTimeout = 2 * time.Second
)

// quotaGate is what this client knows of the cluster's limited quotas.
type quotaGate struct {
	mu         sync.Mutex
	limited    map[proto.QuotaID]proto.QuotaRecord
	skew       int64 // leader's clock minus ours when the list came
	fetched    time.Time
	refreshing bool
}

// inodeQuotas are the quotas file n is charged to.
func inodeQuotas(n *proto.Inode) []proto.QuotaID { return proto.QuotasOf(n.Uid, n.Gid, n.Project) }

// checkGrowth returns EDQUOT if a write growing file n must be refused.
// The first check fetches the list; later ones use what the last fetch
// brought and start a new one in the background once it is older than
// quotaRefresh.
func (c *Client) checkGrowth(n *proto.Inode) error {
	g := &c.quotas
	g.mu.Lock()
	if g.fetched.IsZero() {
		g.mu.Unlock()
		c.refreshQuotas()
		g.mu.Lock()
	} else if time.Since(g.fetched) > quotaRefresh && !g.refreshing {
		g.refreshing = true
		c.inBackground(c.refreshQuotas)
	}
	over := g.overBlocks(n)
	stale := time.Since(g.fetched) > quotaRefresh
	g.mu.Unlock()
	if over && stale {
		// Before refusing, make sure: usage may have gone down since.
		c.refreshQuotas()
		g.mu.Lock()
		over = g.overBlocks(n)
		g.mu.Unlock()
	}
	if over {
		return syscall.EDQUOT
	}
	return nil
}

// overBlocks reports whether a quota of file n was over a byte limit by
// the last list. g.mu is held.
func (g *quotaGate) overBlocks(n *proto.Inode) bool {
	now := time.Now().UnixNano() + g.skew
	for _, q := range inodeQuotas(n) {
		if r, ok := g.limited[q]; ok && r.OverBlocks(now) {
			return true
		}
	}
	return false
}

// headroom is how many more bytes file n may grow by before it reaches a
// byte limit of its quotas, by what this client last learnt
// (math.MaxUint64 where no limit lies ahead).
func (c *Client) headroom(n *proto.Inode) uint64 {
	g := &c.quotas
	g.mu.Lock()
	defer g.mu.Unlock()
	room := uint64(math.MaxUint64)
	for _, q := range inodeQuotas(n) {
		r, ok := g.limited[q]
		if !ok || r.ID == 0 {
			continue
		}
		// Only limits not reached yet: past a soft limit its grace
		// period runs already, and at a hard one growth is refused, so
		// reporting each write would gain nothing.
		for _, limit := range []uint64{r.BlockHard, r.BlockSoft} {
			if limit > r.Bytes {
				room = min(room, limit-r.Bytes)
			}
		}
	}
	return room
}

// refreshQuotas fetches the limited quotas from the metadata leader. A
// failure keeps what the client had.
func (c *Client) refreshQuotas() {
	g := &c.quotas
	reply, err := c.QuotaList(proto.QuotaListReq{All: true, AnyKind: true, Limited: true})
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshing = false
	g.fetched = time.Now()
	if err != nil {
		return
	}
	g.limited = make(map[proto.QuotaID]proto.QuotaRecord, len(reply.Records))
	for _, r := range reply.Records {
		g.limited[proto.QuotaID{Kind: r.Kind, ID: r.ID}] = r
	}
	g.skew = reply.Now - time.Now().UnixNano()
}

// QuotaList asks the metadata leader for quotas' usage and limits, every
// page of a listing.
func (c *Client) QuotaList(r proto.QuotaListReq) (*proto.QuotaListReply, error) {
	return proto.ListQuotas(r, func(r *proto.QuotaListReq, reply *proto.QuotaListReply) error {
		return c.metaCall(proto.OpQuotaList, r.Encode, func(d *wire.Dec) error { reply.Decode(d); return nil })
	})
}

// QuotaSet sets a quota's limits and its kind's grace periods.
func (c *Client) QuotaSet(r *proto.QuotaSetReq) error {
	err := c.metaCall(proto.OpQuotaSet, r.Encode, nil)
	if err == nil {
		c.refreshQuotas()
	}
	return err
}

// reportGrowth commits the size of a file charged to a quota with a byte
// limit once its growth since it was last committed reaches the room that
// was left under the limit, or quotaReportEvery: its writes are flushed
// first, so that the size committed is data the servers hold, and the
// limits are fetched again, so that the next write past the limit is
// refused.
func (h *Handle) reportGrowth() error {
	st := h.st
	st.mu.Lock()
	wrote, dirty := st.wrote, st.dirty
	n := st.inode
	st.mu.Unlock()
	if !dirty {
		return nil
	}
	room := h.c.headroom(&n)
	if room == math.MaxUint64 || (wrote < quotaReportEvery && wrote < room) {
		return nil
	}
	if err := h.c.flushWrites(st.ino); err != nil {
		return err
	}
	if err := h.c.commit(st); err != nil {
		return err
	}
	h.c.refreshQuotas()
	return nil
}
