// Package storage is TandemFS's storage service: the chunk engine that keeps
// file chunks on storage targets (directories on local disks) with per-block
// checksums, and the server that exposes them over rpc and registers them
// with the metadata service.
//
// # On-disk format of a target
//
// A target is a directory. Its layout (format version 1) is:
//
//	target.json                      {"format":1,"uuid":"…","target_id":N}
//	lock                             flock(2)ed while a process serves the target
//	chunks/<hh>/<ino>/<idx>          chunk data, hh = ino%256 as two hex digits
//	chunks/<hh>/<ino>/<idx>.sum      checksum sidecar of that chunk
//
// A new target marks chunks/ FS_TOPDIR_FL (chattr +T) so that ext4 spreads
// the bucket directories over its block groups (spread.go); the format does
// not depend on it.
//
// target.json is written once when the directory is first opened (a random
// UUID) and rewritten atomically when the metadata service assigns the target
// an ID, so that a restarted server can serve before it re-registers.
//
// Chunk data is stored at its offset inside the chunk, so a chunk file is
// sparse where the file has holes. A missing chunk, and any range past the end
// of a chunk file, is a hole: reads return fewer bytes and the client fills
// in zeros.
//
// The sidecar holds one 8-byte entry per 4 KiB block of the chunk: two
// little-endian CRC32C (Castagnoli) values {prev, cur}. The checksum of a
// block is taken over the block's 4096 bytes, where the chunk's last, partial
// block is padded with zeros to 4096 bytes. Because of that padding rule a
// block's checksum does not depend on the chunk's size: growing a chunk (which
// fills with zeros) leaves it valid, and only cutting a chunk inside a block
// changes it.
//
// A block is valid when its checksum equals prev or cur, or when both slots
// are 0 and the block is all zeros (never written: a hole). Entries at or past
// the chunk's last block are meaningless (they may survive a crash); the
// engine cuts the sidecar to the chunk's block count before it extends a
// chunk, and a sidecar shorter than the data reads as {0, 0} entries.
//
// # Crash safety
//
// A write first rewrites the entries of the blocks it touches to
// {checksum of the old contents, checksum of the new contents} with one
// pwrite, then writes the data, always whole blocks from a block boundary
// (boundary blocks are read, verified and merged first), with one pwrite. A
// process killed between or during the two pwrites therefore leaves every
// block holding either its old or its new contents, and both verify. A block
// torn inside itself, or changed by bit rot, matches neither slot and fails
// the read with EIO: the engine never returns bytes it cannot vouch for.
//
// A block the write adds past the chunk's old end gets prev = 0 (there is no
// old contents to fall back to, and until the data pwrite extends the chunk
// the block is past the end and not verified), so a newly written block that
// later reads as zeros, a lost write, is caught. A hole inside the chunk that
// is written for the first time gets prev = CRC32C of a zero block.
//
// Truncation inside a block first rewrites that block's entry to
// {old, new} as a write does, then cuts the data, then the sidecar.
//
// Known limits. Writes are buffered, so after a power cut (not a process
// crash) a block written since the last Sync may have reached the disk
// without its entry; it then fails verification (EIO) rather than return
// bytes nobody vouches for. Acknowledged data is what Sync made durable.
// The prev slot of a block that a write overwrites completely is the old cur
// slot, not re-read from disk: if two crashes in a row both interrupt writes
// to the same block between their two pwrites, the block reads as corrupt
// although it holds the contents of the write before; a replica repairs it.
// Writes failing inside the process (EIO, ENOSPC) re-read the blocks they
// touched and settle their entries, so only real crashes are exposed to this.
//
// # Service
//
// Start runs a storage server: an rpc.Server answering proto.OpChunkWrite,
// OpChunkRead, OpChunkReadSent, OpChunkTruncate, OpChunkSync, OpChunkDelete
// and the rest of proto's storage operations for the targets
// it holds (by target ID; an unknown ID gets ENODEV), which registers with
// the metadata service (proto.OpRegisterServer, under a server UUID kept in
// server.uuid) and then heartbeats (proto.OpHeartbeat) with each target's
// capacity. Replies carry no payload except OpChunkRead's: the bytes read,
// as a wire byte string (wire.Enc.Bytes), shorter than asked where the chunk
// ends; and OpChunkReadSent's: the checksum entries of the blocks as a byte
// string, then the bytes, sent from the chunk's file unread (a file tail,
// wire.FileTail) for the reader to check (package chunksum). Errors travel as errnos: EIO for a block failing verification or a
// disk error, ENOSPC for a full disk, EBADMSG for a malformed request.
package storage
