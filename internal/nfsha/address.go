package nfsha

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/vishvananda/netlink"
)

// The service address moves with the lease: the holder adds it to its
// interface (netlink) and announces it with gratuitous ARP, so that the
// switch and the clients send to the new head at once; a head that loses
// the lease removes it. On the loopback interface (a one-machine cluster)
// the address is an alias that every head shares: it is added, never
// removed by a head that loses its lease, as the head that took it over
// may be using it already; only the listening socket moves.

func prefixOf(svc Service) (*netlink.Addr, error) {
	host, _, err := net.SplitHostPort(svc.Address)
	if err != nil {
		return nil, fmt.Errorf("service address %q: %v", svc.Address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("service address %q: the host must be an IP address", svc.Address)
	}
	bits := svc.Prefix
	if bits == 0 {
		bits = ip.BitLen()
	}
	return netlink.ParseAddr(netip.PrefixFrom(ip, bits).String())
}

func addAddress(svc Service) error {
	if svc.Interface == "" {
		return nil
	}
	link, err := netlink.LinkByName(svc.Interface)
	if err != nil {
		return fmt.Errorf("interface %s: %v", svc.Interface, err)
	}
	a, err := prefixOf(svc)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("adding %s to %s: %v", a.IPNet, svc.Interface, err)
	}
	return nil
}

func removeAddress(svc Service) error {
	if isLoopback(svc.Interface) {
		return nil
	}
	return DropAddress(svc)
}

func isLoopback(name string) bool {
	ifi, err := net.InterfaceByName(name)
	return err == nil && ifi.Flags&net.FlagLoopback != 0
}

// announce sends three gratuitous ARP requests for an IPv4 service
// address on its interface (none on loopback, which has no neighbours).
func announce(svc Service, logf func(string, ...any)) {
	if svc.Interface == "" || isLoopback(svc.Interface) {
		return
	}
	a, err := prefixOf(svc)
	if err != nil {
		return
	}
	ip, ok := netip.AddrFromSlice(a.IP.To4())
	if !ok {
		return
	}
	ifi, err := net.InterfaceByName(svc.Interface)
	if err != nil {
		logf("nfs ha: gratuitous ARP for %s: %v", ip, err)
		return
	}
	c, err := arp.Dial(ifi)
	if err != nil {
		logf("nfs ha: gratuitous ARP for %s on %s: %v", ip, ifi.Name, err)
		return
	}
	defer c.Close()
	p, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, ip, ethernet.Broadcast, ip)
	if err != nil {
		logf("nfs ha: gratuitous ARP for %s: %v", ip, err)
		return
	}
	for i := 0; i < 3; i++ {
		if err := c.WriteTo(p, ethernet.Broadcast); err != nil {
			logf("nfs ha: gratuitous ARP for %s on %s: %v", ip, ifi.Name, err)
			return
		}
	}
}

// DropAddress takes a service address off its interface, loopback
// included: for the launcher of a one-machine cluster once every head has
// stopped.
func DropAddress(svc Service) error {
	if svc.Interface == "" {
		return nil
	}
	link, err := netlink.LinkByName(svc.Interface)
	if err != nil {
		return err
	}
	a, err := prefixOf(svc)
	if err != nil {
		return err
	}
	if err := netlink.AddrDel(link, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return err
	}
	return nil
}
