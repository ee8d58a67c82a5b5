package tests

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"tandemfs/internal/testcluster"
)

// chunkCopies are the files holding chunk idx of inode ino on every
// member of its chain, the head's first.
func chunkCopies(t *testing.T, c *testcluster.Cluster, ino, idx uint64) []string {
	t.Helper()
	for _, ch := range replicatedChainCopies(t, c) {
		var files []string
		for _, dir := range ch.Dirs {
			files = append(files, filepath.Join(dir, fmt.Sprintf("%x%x", ino>>4&0xf, ino&0xf), fmt.Sprint(ino), fmt.Sprint(idx)))
		}
		if _, err := os.Stat(files[0]); err == nil {
			return files
		}
	}
	t.Fatalf("no chain holds chunk %d of inode %d", idx, ino)
	return nil
}

// flipByte garbles the byte at off of file, as bit rot would.
func flipByte(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// writeRandomFile writes n deterministic random bytes to a new file in
// the mount and returns them and the file's inode number.
func writeRandomFile(t *testing.T, path string, n int) ([]byte, uint64) {
	t.Helper()
	data := make([]byte, n)
	rand.New(rand.NewSource(7)).Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var fi syscall.Stat_t
	if err := syscall.Stat(path, &fi); err != nil {
		t.Fatal(err)
	}
	return data, fi.Ino
}

// requireAllServing fails unless every member of every chain serves.
func requireAllServing(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	for id, states := range chainStates(t, c) {
		for _, s := range states {
			if s != "serving" {
				t.Fatalf("chain %d: members %v; a bad block must not take a target out", id, states)
			}
		}
	}
}

// readDirect reads n bytes of path with O_DIRECT, past every cache.
func readDirect(t *testing.T, path string, n int) ([]byte, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw := make([]byte, n+4096)
	shift := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
	buf := raw[shift : shift+n]
	got, err := f.ReadAt(buf, 0)
	return buf[:got], err
}

// TestABadBlockOnTheHeadIsRepairedFromTheOtherCopy: a block whose bytes
// no longer match their checksum on the head of a chain (bit rot) is
// read from the other copy, written back over the bad one, and the
// reader gets the right bytes; no target is taken out for it. The head
// counts the bad block in its metrics. The mount, which asked for the
// bytes sent without being read on the head (OpChunkReadSent), found
// the mismatch itself and read them again the checked way.
func TestABadBlockOnTheHeadIsRepairedFromTheOtherCopy(t *testing.T) {
	t.Setenv("TANDEM_METRICS", "127.0.0.1:0")
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "f")
	data, ino := writeRandomFile(t, path, 512<<10)
	head := chunkCopies(t, c, ino, 0)[0]
	flipByte(t, head, 100_000)

	got, err := readDirect(t, path, len(data))
	if err != nil {
		t.Fatalf("reading a file with a bad block on the head: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the read returned other bytes than were written")
	}
	onDisk, err := os.ReadFile(head)
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("the head's copy was not repaired (%v)", err)
	}
	requireAllServing(t, c)
	logs := ""
	for _, name := range []string{"storage1", "storage2"} {
		b, _ := os.ReadFile(filepath.Join(c.Dir(), "logs", name+".log"))
		logs += string(b)
	}
	if !strings.Contains(logs, "repaired chunk") {
		t.Fatal("no storage server logged the repair")
	}
	if bad := storageSum(t, c, "tandem_storage_checksum_errors_total"); bad < 1 {
		t.Errorf("the storage servers counted %v checksum errors, want at least 1", bad)
	}
	if n := scrapeMetrics(t, c, "mount").sum("tandem_client_sent_read_mismatches_total"); n < 1 {
		t.Errorf("the mount counted %v sent pieces that did not match their checksums, want at least 1", n)
	}
}

// TestABlockBadOnEveryCopyIsAnErrorNotAFailover: when no copy holds the
// block whole, the reader gets EIO, and the targets stay in their chains
// (taking them out would lose the rest of their data's redundancy).
func TestABlockBadOnEveryCopyIsAnErrorNotAFailover(t *testing.T) {
	c := testcluster.Start(t)
	path := filepath.Join(c.Mount(), "f")
	data, ino := writeRandomFile(t, path, 512<<10)
	for _, copy := range chunkCopies(t, c, ino, 0) {
		flipByte(t, copy, 200_000)
	}
	if _, err := readDirect(t, path, len(data)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a block bad on every copy: %v, want EIO", err)
	}
	requireAllServing(t, c)
}
