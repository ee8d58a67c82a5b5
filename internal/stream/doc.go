// Package stream generates and checks self-describing test streams, the
// TandemFS counterpart of the genstream/checkstream tools that the Dell
// NSS-HA white papers used to show that no data is lost while a server fails
// over: a client copies a generated stream into (or out of) the file system
// with dd while a server is failed, and the copy is then checked. Every block
// of a stream names its own offset and its stream, so the check needs nothing
// but the copy: it reports which byte ranges are intact, which were zeroed
// (a hole left by a lost write), which are damaged, which blocks landed at
// the wrong offset or came from another stream, and whether the copy is
// short or long.
//
// # Format
//
// A stream is identified by a 64-bit seed and its length in bytes. It is a
// sequence of 4096-byte blocks (BlockSize, the smallest unit a file system
// loses); the block at byte offset off (a multiple of BlockSize) is a 64-byte
// text header followed by a 4032-byte binary payload. If the length is not a
// multiple of BlockSize the last block is cut short: it is the prefix of the
// block that would be there.
//
// The header is one line of ASCII, so `head -c 64` or `dd skip=` shows where
// a stray block came from:
//
//	"TDS " seed " " offset " " length " " check "\n"
//
// seed, offset and length are 16 lowercase hexadecimal digits and check is 8,
// a checksum that tells a damaged header from a header of another block:
//
//	h     = fmix64(seed ^ fmix64(offset ^ fmix64(length + 0xe7037ed1a0b428db)))
//	check = uint32(h ^ h>>32)
//
// The payload is 504 little-endian 64-bit words. With
//
//	key = fmix64(seed ^ fmix64(offset + 0x9e3779b97f4a7c15))
//	s_i = key + (i+1)*0xa0761d6478bd642f                      (i = 0..503)
//	w_i = (hi ^ lo) | 0x0101010101010101  where hi:lo = s_i * (s_i ^ 0xe7037ed1a0b428db)
//
// fmix64 is the splitmix64 finaliser and w_i is wyrand's output for state
// s_i. Deriving the key through two bijections makes the payloads of any two
// blocks of one stream different, and computing each word from its index
// rather than from the previous word lets the CPU generate several words at
// once. Or-ing 1 into every byte costs one bit of randomness per byte and buys
// the property the checker leans on: no byte of a valid stream is zero (the
// header is text), so zero-filled ranges are found to the exact byte whatever
// their alignment.
//
// # Checking
//
// A Checker is an io.Writer that accepts the stream in chunks of any size,
// so it works behind dd, cp, pipes and network copies. It learns the seed and
// length from the first valid header (unless told them), compares every block
// with the block that belongs at its offset, and classifies what differs:
//
//   - zero: bytes that are zero (a valid stream has none);
//   - misplaced: an intact block of this stream at the wrong offset (a swapped
//     or shifted write), reported with the offset it belongs at;
//   - foreign: an intact block of another stream (another seed or length);
//   - corrupt: anything else, with the reason (bad header checksum, malformed
//     header, payload mismatch), down to the byte;
//   - missing: the stream ends before its length; extra: it goes on after it.
//
// Runs of valid or zero bytes shorter than 16 bytes between two corrupt runs
// are counted as corrupt, so random garbage (which matches the expected byte
// one time in 256) is reported as one range rather than hundreds.
package stream
