package storage

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// piece is what SendPiece handed its caller.
type piece struct {
	n    int
	data []byte // read from the descriptor at the piece's offset
	sums []byte
	hole bool
}

func sendPiece(t *testing.T, tg *Target, ino, idx uint64, off int64, max int) (piece, error) {
	t.Helper()
	var p piece
	n, err := tg.SendPiece(ino, idx, off, max, func(fd, n int, sums []byte) error {
		p.data = make([]byte, n)
		if _, err := unix.Pread(fd, p.data, off); err != nil {
			return err
		}
		p.sums = append([]byte(nil), sums...)
		p.hole = isHole(fd, off, n)
		return nil
	})
	p.n = n
	return p, err
}

// SendPiece hands over the file to send a piece from, the piece's length
// (short where the chunk ends) and the checksum entries of its blocks.
func TestSendPieceHandsOverTheFileAndTheChecksums(t *testing.T) {
	onEachFS(t, func(t *testing.T, tg *Target) {
		data := pattern(1, 1<<20+100)
		mustWrite(t, tg, 7, 0, 0, data)
		for _, c := range []struct {
			off   int64
			max   int
			wantN int
		}{{0, 1 << 20, 1 << 20}, {1 << 20, 1 << 20, 100}, {4096, 8192, 8192}, {2 << 20, 1 << 20, 0}} {
			p, err := sendPiece(t, tg, 7, 0, c.off, c.max)
			if err != nil || p.n != c.wantN {
				t.Fatalf("piece at %d: %d bytes, %v; want %d", c.off, p.n, err, c.wantN)
			}
			if p.n == 0 {
				continue
			}
			if !bytes.Equal(p.data, data[c.off:c.off+int64(p.n)]) {
				t.Fatalf("piece at %d: the descriptor does not hold the chunk's bytes", c.off)
			}
			if len(p.sums) != int(blocksIn(int64(p.n)))*entrySize {
				t.Fatalf("piece at %d: %d bytes of checksums for %d bytes", c.off, len(p.sums), p.n)
			}
			for i := range len(p.sums) / entrySize {
				blk := p.data[i*BlockSize : min((i+1)*BlockSize, p.n)]
				if !getEntry(p.sums, i).valid(blk) {
					t.Fatalf("piece at %d: entry %d does not vouch for its block", c.off, i)
				}
			}
		}
		if p, err := sendPiece(t, tg, 8, 0, 0, 1<<20); err != nil || p.n != 0 {
			t.Fatalf("piece of a missing chunk: %d bytes, %v", p.n, err)
		}
	})
}

// A piece of a sparse chunk that holds no data is a hole, which a copy
// can leave out; one with data is not.
func TestSendPieceTellsHoles(t *testing.T) {
	tg := openTestTarget(t, Options{})
	mustWrite(t, tg, 7, 0, 0, pattern(2, 4096))
	mustWrite(t, tg, 7, 0, 3<<20, pattern(3, 4096))
	for _, c := range []struct {
		off  int64
		hole bool
	}{{0, false}, {1 << 20, true}, {2 << 20, true}, {3 << 20, false}} {
		p, err := sendPiece(t, tg, 7, 0, c.off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if p.hole != c.hole {
			t.Errorf("piece at %d MiB: hole %v, want %v", c.off>>20, p.hole, c.hole)
		}
	}
}

// The kernel reads what sendfile sends from the disk: a target whose disk
// fails reads fails the send as it fails a read.
func TestSendPieceTakesTheFaultsOfARead(t *testing.T) {
	ffs := NewFaultFS(nil)
	tg := openTestTarget(t, Options{FS: ffs})
	mustWrite(t, tg, 7, 0, 0, pattern(4, 8192))
	ffs.Inject(Fault{Ops: OpRead, Err: syscall.EIO})
	called := false
	_, err := tg.SendPiece(7, 0, 0, 1<<20, func(int, int, []byte) error { called = true; return nil })
	if !errors.Is(err, syscall.EIO) || called {
		t.Fatalf("send from a failing disk: %v (send called: %v), want EIO", err, called)
	}
}

// A checked write stores data that matches its sender's checksums and
// refuses, before writing anything, data in which a block does not.
func TestWriteCheckedRefusesDataTheSendersChecksumsDoNotVouchFor(t *testing.T) {
	onEachFS(t, func(t *testing.T, tg *Target) {
		src := openTestTarget(t, Options{})
		data := pattern(5, 3*BlockSize+10)
		mustWrite(t, src, 7, 0, 0, data)
		p, err := sendPiece(t, src, 7, 0, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		old := pattern(6, 5*BlockSize) // the member's stale copy, longer
		mustWrite(t, tg, 7, 0, 0, old)

		bad := bytes.Clone(data)
		bad[2*BlockSize+7] ^= 1
		if err := tg.WriteChecked(7, 0, 0, bad, p.sums, true); !errors.Is(err, syscall.EIO) {
			t.Fatalf("write of a damaged block: %v, want EIO", err)
		}
		if got := readAll(t, tg, 7, 0, 8*BlockSize); !bytes.Equal(got, old) {
			t.Fatal("a refused write changed the chunk")
		}
		if err := tg.WriteChecked(7, 0, 0, data, p.sums, true); err != nil {
			t.Fatalf("write of the sender's data: %v", err)
		}
		want := append(bytes.Clone(data), old[len(data):]...)
		if got := readAll(t, tg, 7, 0, 8*BlockSize); !bytes.Equal(got, want) {
			t.Fatal("the checked write did not store the data")
		}
		if err := tg.WriteChecked(7, 0, 10, data, p.sums, true); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("checked write off a block boundary: %v, want EINVAL", err)
		}
		if err := tg.WriteChecked(7, 0, 0, data, p.sums[:8], true); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("checked write with too few checksums: %v, want EINVAL", err)
		}
	})
}
