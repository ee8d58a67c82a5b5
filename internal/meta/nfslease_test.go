package meta_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/proto"
)

// NFS gateway leases: one head holds a service address at a time, and the
// head that takes it over gets the client connections the last holder
// reported, so that it can reset them.

const testNFSLease = 300 * time.Millisecond

func nfsLease(t *testing.T, c *client.Client, r proto.NFSLeaseReq) *proto.NFSLeaseReply {
	t.Helper()
	r.Address, r.Duration = "10.0.0.1:2049", int64(testNFSLease)
	reply, err := c.NFSLease(context.Background(), &r)
	if err != nil {
		t.Fatalf("lease request of head %s: %v", r.Head, err)
	}
	return reply
}

func TestANewHolderGetsTheLastHoldersClientsOnce(t *testing.T) {
	_, c := setup(t)
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "a"}); !r.Granted || r.Holder != "a" || len(r.Clients) != 0 {
		t.Fatalf("first request: %+v, want granted to a with no clients", r)
	}
	clients := []string{"10.0.0.7:812", "10.0.0.8:40001"}
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "a", SetClients: true, Clients: clients}); !r.Granted {
		t.Fatalf("renewal: %+v", r)
	}
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "b", SetClients: true, Clients: []string{"10.0.0.9:1"}}); r.Granted || r.Holder != "a" || len(r.Clients) != 0 {
		t.Fatalf("b asked while a's lease runs: %+v, want a holding it and no clients", r)
	}
	time.Sleep(testNFSLease + 50*time.Millisecond)
	r := nfsLease(t, c, proto.NFSLeaseReq{Head: "b"})
	if !r.Granted || r.Holder != "b" || !slices.Equal(r.Clients, clients) {
		t.Fatalf("b asked after a's lease ran out: %+v, want granted with a's clients %v", r, clients)
	}
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "b"}); !r.Granted || len(r.Clients) != 0 {
		t.Fatalf("b's renewal: %+v, want no clients (they were handed over once)", r)
	}
}

func TestAHeadWhoseLeaseLapsedGetsItsOwnClientsBack(t *testing.T) {
	_, c := setup(t)
	clients := []string{"[fd00::7]:2050"}
	nfsLease(t, c, proto.NFSLeaseReq{Head: "a", SetClients: true, Clients: clients})
	time.Sleep(testNFSLease + 50*time.Millisecond)
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "a"}); !r.Granted || !slices.Equal(r.Clients, clients) {
		t.Fatalf("a asked again after its lease lapsed: %+v, want its clients %v", r, clients)
	}
}

func TestAHeadThatGivesTheAddressBackLeavesNoClients(t *testing.T) {
	_, c := setup(t)
	nfsLease(t, c, proto.NFSLeaseReq{Head: "a", SetClients: true, Clients: []string{"10.0.0.7:812"}})
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "a", Release: true}); r.Granted || r.Holder != "" {
		t.Fatalf("release: %+v", r)
	}
	time.Sleep(testNFSLease) // the leader must have led a whole lease
	if r := nfsLease(t, c, proto.NFSLeaseReq{Head: "b"}); !r.Granted || len(r.Clients) != 0 {
		t.Fatalf("b after a gave the address back: %+v, want granted, no clients (a closed them)", r)
	}
}
