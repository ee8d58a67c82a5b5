package nfs

import (
	"bytes"
	"context"
	"net/netip"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"tandemfs/internal/acl"
)

// credentials are what a request says about its caller: AUTH_SYS ids, or
// none (AUTH_NONE), and the address it came from.
type credentials struct {
	sys  bool // AUTH_SYS; otherwise AUTH_NONE
	uid  uint32
	gid  uint32
	gids []uint32
	from netip.AddrPort
}

type credentialsKey struct{}

func credentialsOf(ctx context.Context) *credentials {
	c, _ := ctx.Value(credentialsKey{}).(*credentials)
	if c == nil {
		return &credentials{}
	}
	return c
}

// authenticator accepts AUTH_SYS and AUTH_NONE on one connection, and
// puts the caller and the connection's address into each request's
// context. Other flavours (Kerberos) get AUTH_TOOWEAK.
type authenticator struct{ from netip.AddrPort }

func (a authenticator) Authenticate(ctx context.Context, cred, verf *rpcv2.OpaqueAuth) (context.Context, rpcv2.OpaqueAuth, rpcv2.AuthStat) {
	none := rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}
	c := &credentials{from: a.from}
	switch cred.Flavor {
	case rpcv2.AUTH_NONE:
	case rpcv2.AUTH_SYS:
		var p rpcv2.AuthsysParms
		r := bytes.NewReader(cred.Body)
		if _, err := p.ReadFrom(r); err != nil || r.Len() != 0 {
			return ctx, none, rpcv2.AUTH_BADCRED
		}
		c.sys, c.uid, c.gid, c.gids = true, p.Uid, p.Gid, p.Gids
	default:
		return ctx, none, rpcv2.AUTH_TOOWEAK
	}
	return context.WithValue(ctx, credentialsKey{}, c), none, rpcv2.AUTH_OK
}

// caller is whom the rule makes of the credentials: root squashed to the
// anonymous ids unless no_root_squash, everyone with all_squash, and
// AUTH_NONE always.
func (c *credentials) caller(r Rule) acl.Caller {
	anon := acl.Caller{UID: r.AnonUID, GIDs: []uint32{r.AnonGID}}
	if !c.sys || r.Squash == AllSquash {
		return anon
	}
	out := acl.Caller{UID: c.uid, GIDs: make([]uint32, 0, 1+len(c.gids))}
	if r.Squash == RootSquash && c.uid == 0 {
		out.UID = r.AnonUID
	}
	for _, g := range append([]uint32{c.gid}, c.gids...) {
		if r.Squash == RootSquash && g == 0 {
			g = r.AnonGID
		}
		out.GIDs = append(out.GIDs, g)
	}
	return out
}
