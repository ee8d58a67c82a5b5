// Package tests holds integration tests: each starts a real cluster
// (metadata service, storage servers and FUSE client as separate
// processes on loopback TCP, see internal/testcluster) and checks POSIX
// behaviour through the kernel mount, as applications see it.
package tests

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"tandemfs/internal/testcluster"
)

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want %v", err, want)
	}
}

type layout struct {
	ChunkSize uint32   `json:"chunk_size"`
	Count     uint32   `json:"count"`
	Replicas  uint32   `json:"replicas"`
	Inline    bool     `json:"inline"`
	Targets   []uint32 `json:"targets"`
}

func getLayout(t *testing.T, path string) layout {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := syscall.Getxattr(path, "user.tandem.layout", buf)
	if err != nil {
		t.Fatalf("layout of %s: %v", path, err)
	}
	var l layout
	if err := json.Unmarshal(buf[:n], &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPOSIX runs the POSIX behaviour suite against one cluster with the
// default shape (2 servers x 2 targets).
func TestPOSIX(t *testing.T) {
	c := testcluster.Start(t)
	root := c.Mount()
	dir := func(t *testing.T) string {
		d := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("large file round trip across chunks and targets", func(t *testing.T) {
		d := dir(t)
		data := randBytes(9<<20 + 12345)
		mustWrite(t, filepath.Join(d, "big"), data)
		if got := mustRead(t, filepath.Join(d, "big")); !bytes.Equal(got, data) {
			t.Fatal("read back differs from what was written")
		}
		l := getLayout(t, filepath.Join(d, "big"))
		// 2 servers x 2 targets pair up into 2 chains of 2 copies.
		if l.Inline || l.Count != 2 || l.Replicas != 2 || len(l.Targets) != 4 || l.ChunkSize != 1<<20 {
			t.Fatalf("default layout %+v, want 1 MiB chunks over 2 chains of 2 targets", l)
		}
	})

	t.Run("concurrent sequential readers each get their own file's bytes", func(t *testing.T) {
		// Readahead memory is pooled and reused, and a write drops the
		// file's readahead window while reads may still be copying from
		// it: every read must still return exactly the file's bytes.
		// (The reference counting itself is specified by the client's
		// unit tests; the race it prevents is too narrow to hit here
		// reliably.)
		d := dir(t)
		files := make([][]byte, 3)
		for i := range files {
			files[i] = randBytes(12<<20 + i*4097)
			mustWrite(t, filepath.Join(d, fmt.Sprint(i)), files[i])
		}
		stop := make(chan struct{})
		writerDone := make(chan error, 1)
		go func() { // rewrites file 0 with its own bytes: its readahead is dropped again and again
			f, err := os.OpenFile(filepath.Join(d, "0"), os.O_WRONLY, 0)
			if err != nil {
				writerDone <- err
				return
			}
			defer f.Close()
			for off := 0; ; off = (off + 777<<10) % (len(files[0]) - 4096) {
				select {
				case <-stop:
					writerDone <- nil
					return
				default:
				}
				if _, err := f.WriteAt(files[0][off:off+4096], int64(off)); err != nil {
					writerDone <- err
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, len(files))
		for i, want := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := 0; round < 4; round++ {
					got, err := os.ReadFile(filepath.Join(d, fmt.Sprint(i)))
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, want) {
						errs <- fmt.Errorf("file %d, round %d: read back differs", i, round)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		if err := <-writerDone; err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("pwrite at any offset leaves holes that read as zeros", func(t *testing.T) {
		d := dir(t)
		f, err := os.Create(filepath.Join(d, "sparse"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("end"), 5<<20+7); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("mid"), 1<<20-1); err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		if fi.Size() != 5<<20+10 {
			t.Fatalf("size %d", fi.Size())
		}
		buf := make([]byte, fi.Size())
		if _, err := f.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, fi.Size())
		copy(want[1<<20-1:], "mid")
		copy(want[5<<20+7:], "end")
		if !bytes.Equal(buf, want) {
			t.Fatal("sparse file content wrong")
		}
	})

	t.Run("truncate shrinks and grows with zeros", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "t")
		data := randBytes(3 << 20)
		mustWrite(t, p, data)
		if err := os.Truncate(p, 1<<20+100); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 3<<20); err != nil {
			t.Fatal(err)
		}
		got := mustRead(t, p)
		want := append(append([]byte{}, data[:1<<20+100]...), make([]byte, 3<<20-(1<<20+100))...)
		if !bytes.Equal(got, want) {
			t.Fatal("regrown file exposes old bytes or lost data")
		}
		f, _ := os.OpenFile(p, os.O_RDWR, 0)
		defer f.Close()
		if err := f.Truncate(10); err != nil {
			t.Fatal(err)
		}
		if fi, _ := f.Stat(); fi.Size() != 10 {
			t.Fatalf("ftruncate size %d", fi.Size())
		}
	})

	t.Run("small files live inline and move out when they grow", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "small")
		small := randBytes(3000)
		mustWrite(t, p, small)
		if !getLayout(t, p).Inline {
			t.Fatal("a 3000-byte file is not inline")
		}
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		more := randBytes(10000)
		if _, err := f.Write(more); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if l := getLayout(t, p); l.Inline || len(l.Targets) == 0 {
			t.Fatalf("grown file layout %+v, want data on targets", l)
		}
		if got := mustRead(t, p); !bytes.Equal(got, append(append([]byte{}, small...), more...)) {
			t.Fatal("content changed when the file moved to targets")
		}
		if err := os.Truncate(p, 100); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, p); !bytes.Equal(got, small[:100]) {
			t.Fatal("truncated-back file is wrong")
		}
	})

	t.Run("unlinked open file keeps its data until closed", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "ghost")
		data := randBytes(2<<20 + 5)
		mustWrite(t, p, data)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("stat after unlink: %v", err)
		}
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("data of unlinked open file changed")
		}
		f.Close()
	})

	t.Run("rename replaces atomically, across directories, and moves directories", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
		os.Mkdir(a, 0o755)
		os.Mkdir(b, 0o755)
		mustWrite(t, filepath.Join(a, "x"), []byte("new"))
		mustWrite(t, filepath.Join(b, "y"), []byte("old"))
		if err := os.Rename(filepath.Join(a, "x"), filepath.Join(b, "y")); err != nil {
			t.Fatal(err)
		}
		if got := string(mustRead(t, filepath.Join(b, "y"))); got != "new" {
			t.Fatalf("b/y = %q", got)
		}
		os.Mkdir(filepath.Join(a, "sub"), 0o755)
		mustWrite(t, filepath.Join(a, "sub", "f"), []byte("deep"))
		if err := os.Rename(filepath.Join(a, "sub"), filepath.Join(b, "sub")); err != nil {
			t.Fatal(err)
		}
		if got := string(mustRead(t, filepath.Join(b, "sub", "f"))); got != "deep" {
			t.Fatalf("moved dir content %q", got)
		}
		wantErrno(t, syscall.Rename(b, filepath.Join(b, "sub", "inside")), syscall.EINVAL)
		os.Mkdir(filepath.Join(d, "full"), 0o755)
		mustWrite(t, filepath.Join(d, "full", "f"), nil)
		// (os.Rename refuses directory targets itself, so call rename(2).)
		wantErrno(t, syscall.Rename(a, filepath.Join(d, "full")), syscall.ENOTEMPTY)
		if err := syscall.Rename(filepath.Join(b, "sub"), a); err != nil {
			t.Fatalf("replacing an empty directory: %v", err)
		}
	})

	t.Run("readdir lists every entry of a big directory", func(t *testing.T) {
		d := dir(t)
		const n = 3000
		for i := 0; i < n; i++ {
			f, err := os.Create(filepath.Join(d, fmt.Sprintf("e%05d", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		names, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != n {
			t.Fatalf("listed %d entries, want %d", len(names), n)
		}
		got := make([]string, len(names))
		for i, e := range names {
			got[i] = e.Name()
		}
		sort.Strings(got)
		for i := range got {
			if got[i] != fmt.Sprintf("e%05d", i) {
				t.Fatalf("entry %d is %s", i, got[i])
			}
		}
	})

	t.Run("a sparse file's blocks count the bytes written, not the holes", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "sparse")
		blocks := func() int64 {
			t.Helper()
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				t.Fatal(err)
			}
			return st.Blocks
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		if b := blocks(); b != 0 {
			t.Fatalf("a 64 MiB file made by truncate uses %d blocks, want 0", b)
		}
		if _, err := f.WriteAt(randBytes(4096), 8<<20); err != nil {
			t.Fatal(err)
		}
		if b := blocks(); b != 8 {
			t.Fatalf("after writing 4 KiB while open: %d blocks, want 8", b)
		}
		f.Close()
		if b := blocks(); b != 8 {
			t.Fatalf("after writing 4 KiB and closing: %d blocks, want 8", b)
		}
		if err := os.Truncate(p, 2048); err != nil {
			t.Fatal(err)
		}
		if b := blocks(); b != 4 {
			t.Fatalf("cut to 2 KiB: %d blocks, want 4", b)
		}
	})

	t.Run("stat shows size, nlink, blocks and moving times", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		mustWrite(t, p, randBytes(100000))
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		if st.Size != 100000 || st.Nlink != 1 || st.Blocks < 100000/512 {
			t.Fatalf("stat %+v", st)
		}
		before := st.Mtim
		time.Sleep(20 * time.Millisecond)
		f, _ := os.OpenFile(p, os.O_WRONLY, 0)
		f.WriteAt([]byte("x"), 5)
		f.Close()
		syscall.Stat(p, &st)
		if st.Mtim == before {
			t.Fatal("mtime did not move after a write")
		}
		os.Mkdir(filepath.Join(d, "s1"), 0o755)
		os.Mkdir(filepath.Join(d, "s2"), 0o755)
		syscall.Stat(d, &st)
		if st.Nlink != 4 {
			t.Fatalf("directory with two subdirectories has nlink %d", st.Nlink)
		}
	})

	t.Run("chmod chown utimens", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		mustWrite(t, p, []byte("x"))
		// syscall.Chmod: os.Chmod takes set-user-ID as os.ModeSetuid.
		if err := syscall.Chmod(p, 0o4751); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		mt := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		if st.Uid != 1234 || st.Gid != 5678 || st.Mtim.Sec != mt.Unix() || st.Mtim.Nsec != 7000 {
			t.Fatalf("stat %+v", st)
		}
		if st.Mode&0o7777 != 0o4751 && st.Mode&0o7777 != 0o751 { // chown may clear set-user-ID
			t.Fatalf("mode %o", st.Mode)
		}
	})

	t.Run("permissions are enforced for non-root users", func(t *testing.T) {
		d := dir(t)
		os.Chmod(d, 0o777) // dir() is subject to the umask
		private := filepath.Join(d, "private")
		os.Mkdir(private, 0o700)
		mustWrite(t, filepath.Join(d, "ro"), []byte("secret"))
		os.Chmod(filepath.Join(d, "ro"), 0o600)
		if asNobody(`echo x > "$1"`, filepath.Join(private, "f")) == nil {
			t.Fatal("nobody created a file in a 0700 root directory")
		}
		if asNobody(`cat "$1" >/dev/null`, filepath.Join(d, "ro")) == nil {
			t.Fatal("nobody read a 0600 root file")
		}
		if err := asNobody(`echo x > "$1"`, filepath.Join(d, "mine")); err != nil {
			t.Fatalf("nobody could not create a file in a 0777 directory: %v", err)
		}
		var st syscall.Stat_t
		syscall.Stat(filepath.Join(d, "mine"), &st)
		if st.Uid != 65534 {
			t.Fatalf("file created by nobody is owned by %d", st.Uid)
		}
		// A write by another user clears set-user-ID and set-group-ID.
		suid := filepath.Join(d, "suid")
		mustWrite(t, suid, []byte("#!/bin/sh\n"))
		if err := syscall.Chmod(suid, 0o6777); err != nil || modeOf(t, suid) != 0o6777 {
			t.Fatalf("chmod 6777: %v", err)
		}
		if err := asNobody(`echo x >> "$1"`, suid); err != nil {
			t.Fatalf("nobody could not append to a 0777 file: %v", err)
		}
		syscall.Stat(suid, &st)
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			t.Fatalf("mode %o after an unprivileged write still has set-ID bits", st.Mode&0o7777)
		}
	})

	t.Run("symlinks and hard links", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "target")
		mustWrite(t, p, []byte("via link"))
		if err := os.Symlink("target", filepath.Join(d, "sym")); err != nil {
			t.Fatal(err)
		}
		if l, _ := os.Readlink(filepath.Join(d, "sym")); l != "target" {
			t.Fatalf("readlink %q", l)
		}
		if got := string(mustRead(t, filepath.Join(d, "sym"))); got != "via link" {
			t.Fatalf("read through symlink %q", got)
		}
		if err := os.Link(p, filepath.Join(d, "hard")); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		if st.Nlink != 2 {
			t.Fatalf("nlink %d after link", st.Nlink)
		}
		os.Remove(p)
		if got := string(mustRead(t, filepath.Join(d, "hard"))); got != "via link" {
			t.Fatalf("hard link content %q", got)
		}
	})

	t.Run("statfs reports the targets' capacity", func(t *testing.T) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(root, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks == 0 || st.Bfree == 0 || st.Bfree > st.Blocks {
			t.Fatalf("statfs %+v", st)
		}
	})

	t.Run("extended attributes", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		mustWrite(t, p, nil)
		if err := syscall.Setxattr(p, "user.color", []byte("blue"), 0); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, syscall.Setxattr(p, "user.color", []byte("red"), 1 /*XATTR_CREATE*/), syscall.EEXIST)
		buf := make([]byte, 100)
		n, err := syscall.Getxattr(p, "user.color", buf)
		if err != nil || string(buf[:n]) != "blue" {
			t.Fatalf("getxattr %q %v", buf[:n], err)
		}
		n, _ = syscall.Listxattr(p, buf)
		if string(buf[:n]) != "user.color\x00" {
			t.Fatalf("listxattr %q", buf[:n])
		}
		syscall.Removexattr(p, "user.color")
		_, err = syscall.Getxattr(p, "user.color", buf)
		wantErrno(t, err, syscall.ENODATA)
	})

	t.Run("open flags: O_APPEND O_EXCL O_TRUNC O_DIRECT", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		mustWrite(t, p, []byte("abc"))
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		f.Write([]byte("def"))
		f.Close()
		if got := string(mustRead(t, p)); got != "abcdef" {
			t.Fatalf("after append %q", got)
		}
		_, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		wantErrno(t, err, syscall.EEXIST)
		f, _ = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		f.Close()
		if fi, _ := os.Stat(p); fi.Size() != 0 {
			t.Fatalf("O_TRUNC left %d bytes", fi.Size())
		}
		fd, err := syscall.Open(filepath.Join(d, "direct"), syscall.O_CREAT|syscall.O_RDWR|syscall.O_DIRECT, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		buf := alignedBlock(4096)
		copy(buf, "direct I/O")
		if _, err := syscall.Pwrite(fd, buf, 8192); err != nil {
			t.Fatal(err)
		}
		back := alignedBlock(4096)
		if _, err := syscall.Pread(fd, back, 8192); err != nil || !bytes.Equal(back, buf) {
			t.Fatalf("O_DIRECT read back: %v", err)
		}
	})

	t.Run("errors are the POSIX ones", func(t *testing.T) {
		d := dir(t)
		_, err := os.Create(filepath.Join(d, strings.Repeat("n", 256)))
		wantErrno(t, err, syscall.ENAMETOOLONG)
		_, err = os.Stat(filepath.Join(d, "missing"))
		wantErrno(t, err, syscall.ENOENT)
		os.Mkdir(filepath.Join(d, "sub"), 0o755)
		_, err = os.OpenFile(filepath.Join(d, "sub"), os.O_WRONLY, 0)
		wantErrno(t, err, syscall.EISDIR)
		mustWrite(t, filepath.Join(d, "file"), nil)
		_, err = os.Create(filepath.Join(d, "file", "x"))
		wantErrno(t, err, syscall.ENOTDIR)
		wantErrno(t, os.Mkdir(filepath.Join(d, "sub"), 0o755), syscall.EEXIST)
	})

	t.Run("O_SYNC writes (size committed with each) read back at once", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "sync")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		data := randBytes(3<<20 + 5)
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		// Another handle, before any close, reads all of it.
		if got := mustRead(t, p); !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes of %d", len(got), len(data))
		}
	})

	t.Run("fsync and fdatasync", func(t *testing.T) {
		d := dir(t)
		f, _ := os.Create(filepath.Join(d, "f"))
		defer f.Close()
		f.Write(randBytes(1 << 20))
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stripe set is inherited by new files", func(t *testing.T) {
		d := dir(t)
		out, err := exec.Command(testcluster.Binary(t), "stripe", "set", "--chunk-size", "2M", "--count", "3", "--replicas", "1", d).CombinedOutput()
		if err != nil {
			t.Fatalf("stripe set: %v\n%s", err, out)
		}
		os.Mkdir(filepath.Join(d, "sub"), 0o755)
		p := filepath.Join(d, "sub", "f")
		mustWrite(t, p, randBytes(7<<20))
		out, err = exec.Command(testcluster.Binary(t), "stripe", "get", "--json", p).Output()
		if err != nil {
			t.Fatalf("stripe get: %v", err)
		}
		var l layout
		if err := json.Unmarshal(out, &l); err != nil {
			t.Fatalf("stripe get --json: %v: %s", err, out)
		}
		if l.ChunkSize != 2<<20 || l.Count != 3 || l.Replicas != 1 || len(l.Targets) != 3 || l.Inline {
			t.Fatalf("layout %+v, want 2 MiB chunks on 3 targets, one copy", l)
		}
	})
}

// alignedBlock returns an n-byte buffer aligned for O_DIRECT.
func alignedBlock(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)
	return b[off : off+n]
}
