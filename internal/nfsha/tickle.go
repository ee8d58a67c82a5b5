package nfsha

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// A head that takes over an address from a head cut off from the network
// inherits that head's clients' TCP connections without knowing them: a
// client whose requests were all acknowledged by the old head's kernel
// sends nothing more and waits for replies for ever (libnfs has no RPC
// timeout). CTDB's remedy for clustered NFS, "tickle ACKs": the new head
// sends each of those connections an ACK from the service address with
// sequence numbers the client cannot accept; the client's kernel answers
// with an ACK of its own (RFC 793, RFC 5961 3.2), which reaches the new
// head, whose kernel knows no such connection and answers with a reset
// the client does accept. The client reconnects and resends. The old
// holder reports its connections with its lease renewals, and the leader
// hands them to the next holder (meta/nfslease.go).

// tickleRounds are when the tickles go out after the address is taken: a
// client's kernel answers at most one unacceptable segment per connection
// every 500 ms (net.ipv4.tcp_invalid_ratelimit), and one sent before the
// client has learnt the new head's MAC address from the gratuitous ARP
// draws an answer that goes nowhere.
var tickleRounds = []time.Duration{0, 600 * time.Millisecond, 1500 * time.Millisecond}

// tickle resets the old holder's client connections to svc's address,
// in rounds (tickleRounds), unless stop is closed first.
func tickle(svc Service, clients []string, stop <-chan struct{}, logf func(string, ...any)) {
	from, err := netip.ParseAddrPort(svc.Address)
	if err != nil {
		logf("nfs ha: %s: not an IP:port, its clients' old connections are left to time out: %v", svc.Address, err)
		return
	}
	var to []netip.AddrPort
	for _, c := range clients {
		p, err := netip.ParseAddrPort(c)
		if err != nil || p.Addr().Unmap().Is4() != from.Addr().Unmap().Is4() {
			continue
		}
		to = append(to, netip.AddrPortFrom(p.Addr().Unmap(), p.Port()))
	}
	if len(to) == 0 {
		return
	}
	start := time.Now()
	for _, at := range tickleRounds {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(at))):
		}
		if err := sendTickles(from, to); err != nil {
			logf("nfs ha: %s: resetting the last holder's client connections: %v", svc.Address, err)
			return
		}
	}
	logf("nfs ha: %s: sent tickle ACKs to the %d client connections the last holder reported, so they reconnect", svc.Address, len(to))
}

// sendTickles sends one tickle ACK from from to each of to, through a
// raw socket (CAP_NET_RAW) bound to from's address.
func sendTickles(from netip.AddrPort, to []netip.AddrPort) error {
	network := "ip4:tcp"
	if from.Addr().Unmap().Is6() {
		network = "ip6:tcp"
	}
	conn, err := net.ListenPacket(network, from.Addr().Unmap().String())
	if err != nil {
		return fmt.Errorf("a raw socket on %s: %w", from.Addr(), err)
	}
	defer conn.Close()
	var errs []error
	for _, peer := range to {
		seg, err := tickleSegment(from, peer)
		if err == nil {
			_, err = conn.WriteTo(seg, &net.IPAddr{IP: peer.Addr().AsSlice()})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("to %s: %w", peer, err))
		}
	}
	return errors.Join(errs...)
}

// tickleSegment is a TCP ACK from from to to with sequence and
// acknowledgement numbers 0, as CTDB sends: outside the window of any
// connection but a new one, so the client answers it with an ACK that
// tells the truth about the connection.
func tickleSegment(from, to netip.AddrPort) ([]byte, error) {
	tcp := &layers.TCP{SrcPort: layers.TCPPort(from.Port()), DstPort: layers.TCPPort(to.Port()),
		ACK: true, Window: 1234}
	src, dst := net.IP(from.Addr().Unmap().AsSlice()), net.IP(to.Addr().AsSlice())
	var err error
	if from.Addr().Unmap().Is4() {
		err = tcp.SetNetworkLayerForChecksum(&layers.IPv4{SrcIP: src, DstIP: dst, Protocol: layers.IPProtocolTCP})
	} else {
		err = tcp.SetNetworkLayerForChecksum(&layers.IPv6{SrcIP: src, DstIP: dst, NextHeader: layers.IPProtocolTCP})
	}
	if err != nil {
		return nil, err
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, tcp); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
