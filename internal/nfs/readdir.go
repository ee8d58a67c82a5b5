package nfs

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv3"

	"tandemfs/internal/acl"
	"tandemfs/internal/proto"
)

// Directory cookies. The metadata service lists a directory in name
// order, resuming after a name; an NFS cookie has 64 bits. A cookie is
// therefore a hash of the entry's name (1 and 2 are "." and ".."), and
// each head remembers the names of the cookies it handed out. A cookie a
// head does not know (another head gave it, before a failover) is found
// by listing the directory from the start until an entry hashes to it:
// slower, but any head answers any cookie, as any head answers any file
// handle. A cookie whose entry was removed meanwhile gets
// NFS3ERR_BAD_COOKIE, and the client lists the directory again.
const (
	cookieDot    = 1
	cookieDotDot = 2
)

func entryCookie(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	c := h.Sum64() >> 1
	if c <= cookieDotDot {
		c += cookieDotDot + 1
	}
	return c
}

// cookieCache maps (directory, cookie) to the entry's name, for the
// cookies this head handed out (bounded: emptied when full).
type cookieCache struct {
	mu sync.Mutex
	m  map[cookieKey]string
}

type cookieKey struct{ dir, cookie uint64 }

const maxCookies = 1 << 18

func newCookieCache() *cookieCache { return &cookieCache{m: map[cookieKey]string{}} }

func (c *cookieCache) put(dir, cookie uint64, name string) {
	c.mu.Lock()
	if len(c.m) >= maxCookies {
		c.m = map[cookieKey]string{}
	}
	c.m[cookieKey{dir, cookie}] = name
	c.mu.Unlock()
}

func (c *cookieCache) get(dir, cookie uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, ok := c.m[cookieKey{dir, cookie}]
	return name, ok
}

// Listing failures of their own NFS statuses (listStatus).
var (
	errBadCookie = errors.New("no entry has this cookie")     // NFS3ERR_BAD_COOKIE
	errTooSmall  = errors.New("not one entry fits the reply") // NFS3ERR_TOOSMALL
)

// resumeName returns the name to list after for cookie.
func (s *Server) resumeName(dir, cookie uint64) (string, error) {
	if name, ok := s.dirs.get(dir, cookie); ok {
		return name, nil
	}
	after := ""
	for {
		page, err := s.c.ReadDir(dir, after, 1024, false)
		if err != nil {
			return "", err
		}
		for _, e := range page.Entries {
			if entryCookie(e.Name) == cookie {
				s.dirs.put(dir, cookie, e.Name)
				return e.Name, nil
			}
		}
		if !page.More || len(page.Entries) == 0 {
			return "", errBadCookie
		}
		after = page.Entries[len(page.Entries)-1].Name
	}
}

// listed is one entry of a reply.
type listed struct {
	name   string
	ino    uint64
	cookie uint64
	n      *proto.Inode // with plus, if known
}

// listing gathers the entries of dir from cookie on while they fit in
// budget bytes, each costing size(name). eof says the listing reached
// the end.
type listing struct {
	s      *Server
	r      *request
	dir    *proto.Inode
	plus   bool
	budget int
	size   func(name string) int

	used    int
	entries []listed
}

func (l *listing) add(e listed) bool {
	cost := l.size(e.name)
	if l.used+cost > l.budget {
		return false
	}
	l.used += cost
	l.entries = append(l.entries, e)
	return true
}

// run lists from cookie on; a reply that fits no entry, yet is not at
// the end, is errTooSmall.
func (l *listing) run(cookie uint64) (eof bool, err error) {
	eof, err = l.fill(cookie)
	if err == nil && len(l.entries) == 0 && !eof {
		err = errTooSmall
	}
	return eof, err
}

func (l *listing) fill(cookie uint64) (eof bool, err error) {
	dir := l.dir
	if cookie == 0 {
		if !l.add(listed{name: ".", ino: dir.Ino, cookie: cookieDot, n: dir}) {
			return false, nil
		}
	}
	if cookie <= cookieDot {
		parent, err := l.s.lookupIn(l.r, dir, "..")
		if err != nil {
			return false, err
		}
		if !l.add(listed{name: "..", ino: parent.Ino, cookie: cookieDotDot, n: parent}) {
			return false, nil
		}
	}
	after := ""
	if cookie > cookieDotDot {
		if after, err = l.s.resumeName(dir.Ino, cookie); err != nil {
			return false, err
		}
	}
	per := 24
	if l.plus {
		per = 160
	}
	pageSize := min(max((l.budget-l.used)/per, 16), 1024)
	for {
		page, err := l.s.c.ReadDir(dir.Ino, after, pageSize, l.plus)
		if err != nil {
			return false, err
		}
		for i, e := range page.Entries {
			item := listed{name: e.Name, ino: e.Ino, cookie: entryCookie(e.Name)}
			if l.plus && i < len(page.Inodes) && page.Inodes[i].Ino == e.Ino {
				item.n = &page.Inodes[i]
			}
			if !l.add(item) {
				return false, nil
			}
			l.s.dirs.put(dir.Ino, item.cookie, e.Name)
		}
		if !page.More || len(page.Entries) == 0 {
			return true, nil
		}
		after = page.Entries[len(page.Entries)-1].Name
	}
}

// openDir resolves a directory to list: r's caller must be allowed to
// read it.
func (s *Server) openDir(ctx context.Context, fh nfsv3.NfsFh3) (*request, *proto.Inode, error) {
	r, dir, err := s.resolve(ctx, fh)
	if err != nil {
		return nil, nil, err
	}
	if dir.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return r, dir, syscall.ENOTDIR
	}
	return r, dir, s.require(dir, &r.who, acl.MayRead)
}

func xdrString(name string) int { return 4 + (len(name)+3)&^3 }

// listStatus maps a listing failure.
func listStatus(err error) nfsv3.Nfsstat3 {
	switch err {
	case errBadCookie:
		return nfsv3.NFS3ERR_BAD_COOKIE
	case errTooSmall:
		return nfsv3.NFS3ERR_TOOSMALL
	}
	return status(err)
}

// replyOverhead is a READDIR(PLUS) reply without entries: status,
// directory attributes, verifier, end of list and eof.
const replyOverhead = 4 + 4 + nfsv3.Fattr3EncodedSizeBytes + 8 + 4 + 4

func (p *nfsProgram) NfsV3Nfsproc3Readdir(ctx context.Context, a *nfsv3.Readdir3args) (nfsv3.Readdir3res, error) {
	s := p.s
	r, dir, err := s.openDir(ctx, a.Dir)
	if err != nil {
		return &nfsv3.Readdir3res_default{Status: status(err), Resfail: nfsv3.Readdir3resfail{DirAttributes: s.postOp(dir)}}, nil
	}
	l := &listing{s: s, r: r, dir: dir, budget: int(min(a.Count, maxIO)) - replyOverhead,
		size: func(name string) int { return 4 + 8 + xdrString(name) + 8 }}
	eof, err := l.run(a.Cookie)
	if err != nil {
		return &nfsv3.Readdir3res_default{Status: listStatus(err), Resfail: nfsv3.Readdir3resfail{DirAttributes: s.postOp(dir)}}, nil
	}
	var head *nfsv3.Entry3
	for i := len(l.entries) - 1; i >= 0; i-- {
		e := l.entries[i]
		head = &nfsv3.Entry3{Fileid: e.ino, Name: e.name, Cookie: e.cookie, Nextentry: head}
	}
	return &nfsv3.Readdir3res_NFS3_OK{Resok: nfsv3.Readdir3resok{DirAttributes: s.postOp(dir),
		Reply: nfsv3.Dirlist3{Entries: head, Eof: eof}}}, nil
}

func (p *nfsProgram) NfsV3Nfsproc3Readdirplus(ctx context.Context, a *nfsv3.Readdirplus3args) (nfsv3.Readdirplus3res, error) {
	s := p.s
	r, dir, err := s.openDir(ctx, a.Dir)
	if err != nil {
		return &nfsv3.Readdirplus3res_default{Status: status(err), Resfail: nfsv3.Readdirplus3resfail{DirAttributes: s.postOp(dir)}}, nil
	}
	// maxcount bounds the whole reply, dircount the names and cookies
	// alone (RFC 1813, 3.3.17): both are kept.
	dirBudget := int(a.Dircount)
	dirUsed := 0
	l := &listing{s: s, r: r, dir: dir, plus: true, budget: int(min(a.Maxcount, maxIO)) - replyOverhead,
		size: func(name string) int {
			d := 8 + xdrString(name) + 8
			if dirUsed+d > dirBudget && dirBudget > 0 {
				return 1 << 30
			}
			dirUsed += d
			return 4 + d + 4 + nfsv3.Fattr3EncodedSizeBytes + 4 + 4 + handleSize
		}}
	eof, err := l.run(a.Cookie)
	if err != nil {
		return &nfsv3.Readdirplus3res_default{Status: listStatus(err), Resfail: nfsv3.Readdirplus3resfail{DirAttributes: s.postOp(dir)}}, nil
	}
	root := r.exp.root.Load()
	var head *nfsv3.Entryplus3
	for i := len(l.entries) - 1; i >= 0; i-- {
		e := l.entries[i]
		var attrs nfsv3.PostOpAttr = &nfsv3.PostOpAttr_FALSE{}
		var fh nfsv3.PostOpFh3 = &nfsv3.PostOpFh3_FALSE{}
		if e.n != nil {
			attrs = s.postOp(e.n)
			fh = &nfsv3.PostOpFh3_TRUE{Handle: s.handleOf(root, e.ino)}
		}
		head = &nfsv3.Entryplus3{Fileid: e.ino, Name: e.name, Cookie: e.cookie, NameAttributes: attrs, NameHandle: fh, Nextentry: head}
	}
	return &nfsv3.Readdirplus3res_NFS3_OK{Resok: nfsv3.Readdirplus3resok{DirAttributes: s.postOp(dir),
		Reply: nfsv3.Dirlistplus3{Entries: head, Eof: eof}}}, nil
}
