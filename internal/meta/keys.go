package meta

import (
	"encoding/binary"
)

// Pebble key layout. Integers are big-endian so that keys sort numerically
// and a directory's entries sort by name under their parent's prefix.
//
//	i<ino>           inode record (inodeRec)
//	d<parent><name>  directory entry: child ino (8) + file type bits (4)
//	x<ino><name>     extended attribute value
//	o<ino>           orphan: unlinked while open; value = session id (8)
//	g<ino>           garbage: a removed file whose chunks are still on targets; value = chains
//	l<ino>           the file's locks (locks.go)
//	cs<id>           storage server (serverRec)
//	ct<id>           storage target (targetRec)
//	cc<id>           chain (chainRec)
//	s...             state scalars (applied index, counters, settings)
const (
	pInode   = 'i'
	pDent    = 'd'
	pXattr   = 'x'
	pOrphan  = 'o'
	pGarbage = 'g'
	pLock    = 'l'
)

var (
	keyApplied     = []byte("s/applied")
	keyNextIno     = []byte("s/nextino")
	keyNextServer  = []byte("s/nextserver")
	keyNextTarget  = []byte("s/nexttarget")
	keyNextChain   = []byte("s/nextchain")
	keyMapVersion  = []byte("s/mapversion")
	keyInlineLimit = []byte("s/inlinelimit")
	prefixServer   = []byte("cs")
	prefixTarget   = []byte("ct")
	prefixChain    = []byte("cc")
	prefixFailed   = []byte("cf") // targets whose disk failed: the reason

)

func u64Key(prefix byte, v uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], v)
	return k
}

func inoKey(ino uint64) []byte     { return u64Key(pInode, ino) }
func orphanKey(ino uint64) []byte  { return u64Key(pOrphan, ino) }
func garbageKey(ino uint64) []byte { return u64Key(pGarbage, ino) }

func nameKey(prefix byte, ino uint64, name string) []byte {
	k := make([]byte, 9, 9+len(name))
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], ino)
	return append(k, name...)
}

func dentKey(parent uint64, name string) []byte { return nameKey(pDent, parent, name) }
func xattrKey(ino uint64, name string) []byte   { return nameKey(pXattr, ino, name) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

func u32Key(prefix []byte, v uint32) []byte {
	k := append([]byte(nil), prefix...)
	return binary.BigEndian.AppendUint32(k, v)
}
