package proto

import "tandemfs/internal/wire"

// CacheReport is a storage server's report on the flash cache in front of
// one of its targets (internal/flashcache), sent with its heartbeats and
// shown by `tandem status`.
type CacheReport struct {
	Target uint32 // the target's ID (0 before it has one)
	Path   string // the target's directory
	Dir    string // the cache directory
	Mode   string // "writethrough", "writeback", "off"
	Size   uint64 // bytes the cache may hold
	Used   uint64 // bytes its copies hold
	Dirty  uint64 // bytes on the flash only, not yet on the disk
	Files  uint64
	Hits   uint64 // chunk reads the flash answered
	Misses uint64 // chunk reads the disk answered
	// Promoted and Evicted count the chunk files copied to the flash
	// and dropped from it; Destaged the bytes copied to the disk, and
	// DestageRate the bytes a second of late.
	Promoted, Evicted, Destaged, DestageRate uint64
	// Failed says why the cache device was dropped ("" while it serves).
	Failed string
}

func (r *CacheReport) Encode(e *wire.Enc) {
	e.U32(r.Target)
	e.String(r.Path)
	e.String(r.Dir)
	e.String(r.Mode)
	for _, v := range []uint64{r.Size, r.Used, r.Dirty, r.Files, r.Hits, r.Misses, r.Promoted, r.Evicted, r.Destaged, r.DestageRate} {
		e.U64(v)
	}
	e.String(r.Failed)
}

func (r *CacheReport) Decode(d *wire.Dec) {
	r.Target = d.U32()
	r.Path, r.Dir, r.Mode = d.String(4096), d.String(4096), d.String(32)
	for _, v := range []*uint64{&r.Size, &r.Used, &r.Dirty, &r.Files, &r.Hits, &r.Misses, &r.Promoted, &r.Evicted, &r.Destaged, &r.DestageRate} {
		*v = d.U64()
	}
	r.Failed = d.String(4096)
}

// encodeCaches and decodeCaches carry a list of reports at the end of a
// message; a message from before caches ends before it.
func encodeCaches(e *wire.Enc, rs []CacheReport) {
	e.U32(uint32(len(rs)))
	for i := range rs {
		rs[i].Encode(e)
	}
}

func decodeCaches(d *wire.Dec) []CacheReport {
	if len(d.Rest()) < 4 {
		return nil
	}
	rs := make([]CacheReport, d.Count(MaxList, 95))
	for i := range rs {
		rs[i].Decode(d)
	}
	return rs
}
