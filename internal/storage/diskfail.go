package storage

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"tandemfs/internal/proto"
	"tandemfs/internal/rpc"
)

// A target whose disk returns I/O errors is failed over like a failed
// server, but alone: a replicated chain's operation that fails with EIO is
// retried once (a single transient error is no failure); if it fails
// again, the server stops serving the target's replicated chains and
// reports it to the metadata leader, which takes it out of its chains
// through the Raft log. The caller gets EAGAIN and retries along the new
// chain. Chains of one target (a file of one copy, a shard of an
// erasure-coded file) have no other copy: the target is reported failed
// all the same, so that `tandem status` shows the disk, but their errors
// go to the caller as they are (an erasure-coded file's client rebuilds
// the shard from the others).

// failedTargets are this server's targets taken out after disk errors,
// with the error, until the server restarts (or, for a loss its file
// system recovers from, until recoverInPlace brings the target back).
type failedTargets struct {
	mu sync.Mutex
	m  map[uint32]error
}

func (f *failedTargets) get(id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[id]
}

// add records a failure and reports whether it is new.
func (f *failedTargets) add(id uint32, err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[uint32]error{}
	}
	if f.m[id] != nil {
		return false
	}
	f.m[id] = err
	return true
}

// remove forgets the failure of a target brought back (lostchunks.go).
func (f *failedTargets) remove(id uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}

// diskRetryDelay is the pause before retrying an operation that failed
// with an I/O error.
const diskRetryDelay = 20 * time.Millisecond

// guardDisk runs op, an operation on target's copy of a replicated chain,
// with one retry after an I/O error, and fails the target if the retry
// fails too.
func (s *Service) guardDisk(target uint32, op func() error) error {
	err := op()
	if !isDiskError(err) {
		return err
	}
	time.Sleep(diskRetryDelay)
	if err2 := op(); !isDiskError(err2) {
		s.logf("storage: target %d: I/O error, retried successfully: %v", target, err)
		return err2
	}
	s.failTarget(target, err)
	return rpc.Errorf(syscall.EAGAIN, "target %d failed (%v); waiting for failover", target, err)
}

// guardAlone runs op, an operation on a chain of one target, with one
// retry after an I/O error; if the retry fails too the target is reported
// failed, and the caller gets the error.
func (s *Service) guardAlone(target uint32, op func() error) error {
	err := op()
	if !isDiskError(err) {
		return err
	}
	time.Sleep(diskRetryDelay)
	if err = op(); isDiskError(err) {
		s.failTarget(target, err)
	}
	return err
}

func isDiskError(err error) bool {
	var re *rpc.Error
	return err != nil && errors.Is(err, syscall.EIO) && !errors.As(err, &re)
}

// failTarget stops serving target and reports it to the metadata leader,
// retrying until the leader has it.
func (s *Service) failTarget(target uint32, cause error) {
	if !s.failed.add(target, cause) {
		return
	}
	s.logf("storage: target %d FAILED after repeated I/O errors: %v; taking it out of its chains (restart the server once the disk is fixed or replaced)", target, cause)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		req := proto.TargetFailedReq{Target: target, Reason: cause.Error()}
		for {
			if _, err := s.callMeta(proto.OpTargetFailed, req.Encode, nil); err == nil {
				s.recoverInPlace(target)
				return
			} else {
				s.logf("storage: reporting the failure of target %d: %v", target, explainMetaErr(err))
			}
			if !s.sleep(250 * time.Millisecond) {
				return
			}
		}
	}()
}
