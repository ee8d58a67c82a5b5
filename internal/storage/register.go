package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
	"tandemfs/internal/wire"
)

// run registers with the metadata service, retrying until it answers, then
// heartbeats every interval. A heartbeat the metadata service refuses (it
// lost or never had our registration) triggers a new registration.
func (s *Service) run() {
	defer s.wg.Done()
	for {
		for !s.register() {
			if !s.sleep(s.cfg.RetryInterval) {
				return
			}
		}
		if !s.heartbeatUntilRefused() {
			return
		}
	}
}

// sleep waits d and reports whether the service is still running.
func (s *Service) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

func (s *Service) targetInfos() []proto.TargetInfo {
	infos := make([]proto.TargetInfo, len(s.targets))
	for i, tg := range s.targets {
		infos[i] = proto.TargetInfo{UUID: tg.UUID(), Path: tg.Dir(), Device: deviceOf(tg.Dir()), Fresh: tg.Replacement()}
		total, free, err := tg.Capacity()
		if err != nil {
			s.logf("storage: target %s: capacity: %v", tg.Dir(), err)
			continue // reported as 0 bytes: the metadata service places nothing there
		}
		infos[i].TotalBytes, infos[i].FreeBytes = total, free
	}
	return infos
}

// cacheReports are the reports of the targets' flash caches, with their
// target IDs.
func (s *Service) cacheReports() []proto.CacheReport {
	if s.cfg.CacheReports == nil {
		return nil
	}
	rs := s.cfg.CacheReports()
	for i := range rs {
		for _, tg := range s.targets {
			if filepath.Clean(rs[i].Path) == tg.Dir() {
				rs[i].Target = tg.ID()
			}
		}
	}
	return rs
}

// register sends OpRegisterServer and adopts the IDs it returns.
func (s *Service) register() bool {
	req := proto.RegisterServerReq{UUID: s.uuid, Addr: s.addr, Rack: s.cfg.Rack, Targets: s.targetInfos(), Known: s.knownChainVersions()}
	var rep proto.RegisterServerReply
	addr, err := s.callMeta(proto.OpRegisterServer, req.Encode, func(d *wire.Dec) error {
		rep.Decode(d)
		return d.Err()
	})
	if err != nil {
		s.logf("storage: cannot register with the metadata service: %v; retrying in %v", explainMetaErr(err), s.cfg.RetryInterval)
		return false
	}
	if len(rep.TargetIDs) != len(s.targets) {
		s.logf("storage: metadata service at %s answered registration with %d target IDs for %d targets; retrying in %v",
			addr, len(rep.TargetIDs), len(s.targets), s.cfg.RetryInterval)
		return false
	}
	var ids []string
	for i, tg := range s.targets {
		if old := tg.ID(); old != 0 && old != rep.TargetIDs[i] {
			s.logf("storage: target %s changes ID from %d to %d", tg.Dir(), old, rep.TargetIDs[i])
		}
		if err := tg.SetID(rep.TargetIDs[i]); err != nil {
			s.logf("storage: %v; retrying in %v", err, s.cfg.RetryInterval)
			return false
		}
		ids = append(ids, fmt.Sprintf("%s=%d", tg.Dir(), rep.TargetIDs[i]))
		if req.Targets[i].Fresh {
			if err := tg.ClearReplacement(); err != nil {
				s.logf("storage: %v", err)
			}
		}
	}
	s.indexTargets()
	s.serverID.Store(rep.ServerID)
	if err := s.refreshView(0); err != nil {
		s.logf("storage: loading the cluster map: %v; retrying in %v", explainMetaErr(err), s.cfg.RetryInterval)
		return false
	}
	s.logf("storage: registered with the metadata service at %s as server %d; targets %s", addr, rep.ServerID, strings.Join(ids, ", "))
	s.regOnce.Do(func() { close(s.reg) })
	return true
}

// heartbeatUntilRefused heartbeats until the service stops (false) or the
// metadata service refuses a heartbeat (true: register again). The first
// heartbeat goes at once: it grants the lease replicated chains need.
func (s *Service) heartbeatUntilRefused() bool {
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	failures := 0
	for {
		err := s.heartbeat(proto.NetPublic, s.metas)
		var re *rpc.Error
		switch {
		case err == nil:
			if failures > 0 {
				s.logf("storage: heartbeats to the metadata service resumed after %d failure(s)", failures)
			}
			failures = 0
		case errors.As(err, &re):
			s.logf("storage: metadata service refused our heartbeat (%v); registering again", err)
			return true
		default:
			s.logQuietly(failures, "storage: heartbeat failed: %v", explainMetaErr(err))
			failures++
		}
		select {
		case <-s.stop:
			return false
		case <-tick.C:
		}
	}
}

// heartbeatPrivate heartbeats over the private network, once registered.
// These heartbeats do not extend the lease: a server clients cannot reach
// is failed over even if the metadata service still hears it privately.
func (s *Service) heartbeatPrivate() {
	defer s.wg.Done()
	select {
	case <-s.stop:
		return
	case <-s.reg:
	}
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	failures := 0
	for {
		if err := s.heartbeat(proto.NetPrivate, s.private); err != nil {
			s.logQuietly(failures, "storage: heartbeat over the private network failed: %v", explainMetaErr(err))
			failures++
		} else {
			failures = 0
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// logQuietly logs the first failure of a series and then about every
// 30 s, not every interval: a long outage must not flood the log.
func (s *Service) logQuietly(failures int, format string, args ...any) {
	if failures%max(1, int(30*time.Second/s.cfg.HeartbeatInterval)) == 0 {
		s.logf(format, args...)
	}
}

// heartbeat sends one heartbeat over network net. An acknowledgement over
// the public network extends the lease from the time the heartbeat was
// sent, so the lease always ends before the leader, which heard it later,
// can judge the server silent; a newer map version makes the server
// reload the map.
func (s *Service) heartbeat(net uint8, metas []*rpc.Client) error {
	req := proto.HeartbeatReq{ServerID: s.serverID.Load(), Network: net, Targets: s.targetInfos(), Resyncs: s.resyncs.progress(),
		Scrubs: s.scrubs.progress(), Caches: s.cacheReports()}
	var rep proto.HeartbeatReply
	sent := time.Now()
	_, err := s.callMetaOn(metas, proto.OpHeartbeat, req.Encode, func(d *wire.Dec) error { rep.Decode(d); return d.Err() })
	if err != nil {
		return err
	}
	if net == proto.NetPublic && rep.LeaseMs > 0 {
		lease := time.Duration(rep.LeaseMs) * time.Millisecond
		s.cs.leaseUntil.Store(sent.Add(lease))
		if s.cfg.HeartbeatInterval > lease/3 {
			s.leaseWarn.Do(func() {
				s.logf("storage: WARNING: heartbeat interval %v is too long for a lease of %v: replicated chains will pause between heartbeats; use at most %v",
					s.cfg.HeartbeatInterval, lease, lease/3)
			})
		}
	}
	if v := s.cs.view.Load(); v == nil || rep.MapVersion > v.version {
		if err := s.refreshView(rep.MapVersion); err != nil {
			s.logf("storage: reloading the cluster map: %v", explainMetaErr(err))
		}
	}
	return nil
}

// callMeta calls op on the metadata replicas, starting with the one that
// answered last, and returns the address of the one that answered.
func (s *Service) callMeta(op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) (string, error) {
	return s.callMetaOn(s.metas, op, enc, dec)
}

func (s *Service) callMetaOn(metas []*rpc.Client, op uint16, enc func(*wire.Enc), dec func(*wire.Dec) error) (string, error) {
	var errs []error
	first := int(s.metaNext.Load())
	for i := range metas {
		n := (first + i) % len(metas)
		c := metas[n]
		err := c.Call(op, enc, dec)
		if err == nil {
			s.metaNext.Store(int32(n))
			return c.Addr, nil
		}
		var re *rpc.Error
		if errors.As(err, &re) {
			err = fmt.Errorf("metadata service at %s: %w", c.Addr, err)
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// explainMetaErr makes a failed call to the metadata service say what to
// check: a secret mismatch reads very differently from a service that is
// not running.
func explainMetaErr(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	if errors.Is(err, rpc.ErrAuth) {
		return msg + " — the cluster secrets differ: check --secret-file against the metadata service's"
	}
	if rpc.IsNetError(err) {
		return "metadata service unreachable: " + msg
	}
	return msg
}

// deviceOf names the file system holding path across machines (0 if it
// cannot be read), so that the metadata service counts targets that share
// a file system once: a hash of this machine's ID and the file system's
// device number, which alone repeats from machine to machine.
func deviceOf(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(machineID()))
	binary.Write(h, binary.LittleEndian, uint64(st.Dev))
	return max(h.Sum64(), 1)
}

// machineID is systemd's machine ID, or the host name where there is none.
// Storage servers in network namespaces of one machine share it, as they
// share its disks.
func machineID() string {
	for _, f := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(f); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			return strings.TrimSpace(string(b))
		}
	}
	host, _ := os.Hostname()
	return host
}
