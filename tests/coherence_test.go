package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/testcluster"
)

// Two clients, two kernels: the kernel of a mount may keep names and
// attributes for ten seconds while its client follows the metadata
// leader's change stream, yet a change made through another mount shows
// in well under a second, because the client passes every change of
// another client on to its kernel (FUSE notify).

// seenSoon is how quickly another mount's change must show: far below
// the kernel's timeout, so that only an invalidation can explain it.
const seenSoon = 700 * time.Millisecond

// secondMount mounts the cluster a second time, as another client host
// would, with extra flags for tandem mount, and unmounts it when the test
// ends.
func secondMount(t *testing.T, c *testcluster.Cluster, flags ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, log := startMount(t, c, dir, flags...)
	t.Cleanup(func() {
		// The daemon ends by itself once its mount is gone. Killed at
		// once, it could be waiting for its own answer (go-fuse opens a
		// file on its mount as it starts): that thread then never
		// ends, nor the process, and neither did the test (CI,
		// 2026-11-27). So kill only one that did not end.
		syscall.Unmount(dir, syscall.MNT_DETACH)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Errorf("the second mount's process %d did not end after its unmount and SIGKILL", cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("second mount's log:\n%s", log.String())
		}
	})
	if err := waitFUSEMount(dir, 10*time.Second); err != nil {
		t.Fatalf("second mount did not come up: %v\n%s", err, log.String())
	}
	return dir
}

// twoMounts starts a cluster and mounts it twice, as two client hosts.
func twoMounts(t *testing.T) (a, b string) {
	c := testcluster.Start(t)
	return c.Mount(), secondMount(t, c)
}

// showsSoon polls cond until it holds, failing after seenSoon.
func showsSoon(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(seenSoon)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen through the other mount within %v", what, seenSoon)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestChangesThroughOneMountShowThroughAnotherAtOnce(t *testing.T) {
	a, b := twoMounts(t)
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Let both clients' watches settle, then fill b's kernel cache.
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(b, "f")); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(filepath.Join(a, "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	showsSoon(t, "chmod", func() bool {
		st, err := os.Stat(filepath.Join(b, "f"))
		return err == nil && st.Mode().Perm() == 0o600
	})

	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	showsSoon(t, "rename", func() bool {
		_, errOld := os.Stat(filepath.Join(b, "f"))
		_, errNew := os.Stat(filepath.Join(b, "g"))
		return errors.Is(errOld, fs.ErrNotExist) && errNew == nil
	})

	if err := os.WriteFile(filepath.Join(a, "g"), []byte("second, longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	showsSoon(t, "rewrite", func() bool {
		data, err := os.ReadFile(filepath.Join(b, "g"))
		return err == nil && string(data) == "second, longer"
	})

	if err := os.Remove(filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	showsSoon(t, "unlink", func() bool {
		_, err := os.Stat(filepath.Join(b, "g"))
		return errors.Is(err, fs.ErrNotExist)
	})

	// A name created through b is found through a at once: a holds no
	// lease on the root, so its kernel did not keep the absence.
	if _, err := os.Stat(filepath.Join(a, "h")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("h before it exists: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b, "h"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a, "h")); err != nil {
		t.Fatalf("a file just created through the other mount: %v", err)
	}
}

// A mount answers "no such name" itself in a directory it holds a lease
// on (one it made, or one it found names missing in twice), yet a name
// made through another mount is found the moment the other mount's call
// returns: the change is answered only once the lease holder let go.
func TestANameMadeThroughAnotherMountIsFoundDespiteLeases(t *testing.T) {
	a, b := twoMounts(t)
	time.Sleep(300 * time.Millisecond) // both watches live
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("d%d", i)
		if i%2 == 0 {
			// Made through a: a holds a lease on it from the start.
			if err := os.Mkdir(filepath.Join(a, name), 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			// Made through b: a asks for a lease after two misses.
			if err := os.Mkdir(filepath.Join(b, name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, missing := range []string{"p", "q", "x"} {
			if _, err := os.Stat(filepath.Join(a, name, missing)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s/%s before it exists: %v", name, missing, err)
			}
		}
		time.Sleep(20 * time.Millisecond) // a lease asked for is granted
		if err := os.WriteFile(filepath.Join(b, name, "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(a, name, "x")); err != nil {
			t.Fatalf("%s/x just made through the other mount: %v", name, err)
		}
	}
}

// A mount's kernel keeps "no such name" while a directory lease vouches
// for it, so a name probed again and again (compilers' include paths,
// Python's imports) is asked for once. Yet a name made through another
// mount is found at once: the maker's call is answered only after the
// lease holder took back every absence the lease vouched for, including
// those of names made later, whose makers no longer wait for it.
func TestMissingNamesAreAskedForOnceUnderALeaseAndFoundOnceMadeElsewhere(t *testing.T) {
	a, b := twoMounts(t)
	time.Sleep(300 * time.Millisecond) // both watches live
	names := []string{"x", "y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7"}
	for attempt := 0; ; attempt++ {
		d := fmt.Sprintf("d%d", attempt)
		if err := os.Mkdir(filepath.Join(a, d), 0o755); err != nil { // a holds its lease
			t.Fatal(err)
		}
		before := clientStats(t, a).Lookups
		for i := 0; i < 20; i++ {
			for _, name := range names {
				if _, err := os.Stat(filepath.Join(a, d, name)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s/%s before it exists: %v", d, name, err)
				}
			}
		}
		asked := clientStats(t, a).Lookups - before
		if asked > uint64(2*len(names)) {
			// The lease (0.45 s from the mkdir) may have run out on a
			// slow machine; a fresh directory gives a fresh one.
			if attempt < 3 {
				continue
			}
			t.Fatalf("%d lookups of %d missing names under a lease reached the client %d times", 20*len(names), len(names), asked)
		}
		// x ends a's lease: the leader waits for a to let go. The y's
		// are made without waiting for a, so a must have let go of
		// their absences too.
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(b, d, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(a, d, name)); err != nil {
				t.Fatalf("%s/%s just made through the other mount: %v", d, name, err)
			}
		}
		return
	}
}

// A mount opens a file it holds a lease on without asking the metadata
// service, yet a file closed through another mount is read whole the
// moment the other mount's close returns (close-to-open, as MPI ranks
// rely on across a barrier): the close is answered only once the lease
// holder let go.
func TestAFileClosedThroughAnotherMountIsReadWholeDespiteLeases(t *testing.T) {
	a, b := twoMounts(t)
	time.Sleep(300 * time.Millisecond) // both watches live
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("f%d", i)
		// Made and read through a: a holds a lease on it.
		if err := os.WriteFile(filepath.Join(a, name), []byte("short"), 0o644); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if data, err := os.ReadFile(filepath.Join(a, name)); err != nil || string(data) != "short" {
				t.Fatalf("%s read through the mount that wrote it: %q, %v", name, data, err)
			}
		}
		// Rewritten through b, longer each round (inline, then on the
		// storage targets).
		want := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1)*(i+1))
		if err := os.WriteFile(filepath.Join(b, name), want, 0o644); err != nil {
			t.Fatal(err)
		}
		if data, err := os.ReadFile(filepath.Join(a, name)); err != nil || !bytes.Equal(data, want) {
			t.Fatalf("%s just closed through the other mount: read %d bytes (%v), want %d", name, len(data), err, len(want))
		}
	}
}

// The kernel in front of a client keeps a file's attributes, its size
// among them, for up to ten seconds while the client follows the change
// stream, and the stream brings another client's change a few
// milliseconds after it is made. A client holding a file lease makes the
// other's change wait until it has passed it on; one without (a file
// another client changed a moment before it was opened here gets none)
// must not let an open read up to the old size either (found by
// tests/fsx_test.go: the read ended at the size written here).
func TestAFileGrownThroughAnotherMountIsReadWholeWhereItsSizeWasCached(t *testing.T) {
	a, b := twoMounts(t)
	time.Sleep(300 * time.Millisecond) // both watches live
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("f%d", i)
		// Made through a, read through b (b takes a lease), rewritten
		// through a (which ends b's lease: the file gets none for a
		// while).
		if err := os.WriteFile(filepath.Join(a, name), []byte("made through a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(filepath.Join(b, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(a, name), []byte("rewritten through a"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Written through b, without a lease; its kernel takes the
		// size from the stat.
		first := bytes.Repeat([]byte{byte('a' + i)}, 5000+1000*i)
		f, err := os.OpenFile(filepath.Join(b, name), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(first); err != nil {
			t.Fatal(err)
		}
		if st, err := f.Stat(); err != nil || st.Size() != int64(len(first)) {
			t.Fatalf("%s: size %v (%v) through the writing open, want %d", name, st.Size(), err, len(first))
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// Grown through a, and read whole through b at once.
		g, err := os.OpenFile(filepath.Join(a, name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		more := bytes.Repeat([]byte{'+'}, 3000)
		if _, err := g.Write(more); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		want := append(first, more...)
		if data, err := os.ReadFile(filepath.Join(b, name)); err != nil || !bytes.Equal(data, want) {
			t.Fatalf("%s grown through the other mount and closed: read %d bytes (%v), want %d", name, len(data), err, len(want))
		}
	}
}

// A write must drop a file's capabilities (security.capability), as on a
// local file system. A client answers the kernel's question about them
// itself for a file it created, so when another client sets them, the
// change it sees on the watch must end that answer. (The kernel keeps a
// "no capability" mark of its own on an inode until it fetches its
// attributes again, which an open does; so the write here goes through a
// new open, as the next writer's would.)
func TestAWriteDropsCapabilitiesSetThroughAnotherMount(t *testing.T) {
	a, b := twoMounts(t)
	f, err := os.OpenFile(filepath.Join(a, "tool"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("#!/bin/true\n")); err != nil {
		t.Fatal(err)
	}
	// struct vfs_cap_data, revision 2: cap_net_raw (13) permitted.
	capNetRaw := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := syscall.Setxattr(filepath.Join(b, "tool"), "security.capability", capNetRaw, 0); err != nil {
		t.Fatalf("setting a capability through the other mount: %v", err)
	}
	buf := make([]byte, 64)
	showsSoon(t, "capability", func() bool {
		_, err := syscall.Getxattr(filepath.Join(a, "tool"), "security.capability", buf)
		return err == nil
	})
	g, err := os.OpenFile(filepath.Join(a, "tool"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Write([]byte("exit 0\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Getxattr(filepath.Join(b, "tool"), "security.capability", buf); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("capability after a write: %v, want ENODATA (dropped)", err)
	}
}
