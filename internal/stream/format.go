package stream

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
)

const (
	// BlockSize is the unit in which a stream names its offsets.
	BlockSize = 4096
	// HeaderSize is the length of the text header at the start of each block.
	HeaderSize = 64

	payloadSize = BlockSize - HeaderSize
	magic       = "TDS "

	// Byte positions of the header fields.
	seedAt  = 4
	offAt   = 21
	lenAt   = 38
	checkAt = 55

	golden  = 0x9e3779b97f4a7c15
	wyP0    = 0xa0761d6478bd642f
	wyP1    = 0xe7037ed1a0b428db
	nonZero = 0x0101010101010101
)

// Seed identifies a stream. It prints, and marshals to JSON, as 0x-prefixed
// hexadecimal: JSON numbers lose precision above 2^53 in most consumers.
type Seed uint64

func (s Seed) String() string { return fmt.Sprintf("0x%016x", uint64(s)) }

// MarshalText implements encoding.TextMarshaler.
func (s Seed) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts what
// ParseSeed accepts.
func (s *Seed) UnmarshalText(b []byte) error {
	v, err := ParseSeed(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSeed parses a seed written in decimal, or in hexadecimal with a 0x
// prefix (as Seed.String prints it).
func ParseSeed(s string) (Seed, error) {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid seed %q: want a 64-bit number such as 42 or 0x2a", s)
	}
	return Seed(v), nil
}

// DefaultSeed derives a seed from a name (such as the output file's) and the
// stream's length, so that running the same command twice writes the same
// bytes while streams written under different names can be told apart.
func DefaultSeed(name string, length int64) Seed {
	// FNV-1a, then mixed with the length.
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	return Seed(fmix64(h ^ fmix64(uint64(length)+golden)))
}

// fmix64 is the splitmix64 finaliser: a bijection on uint64 that mixes well.
func fmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// blockKey is the payload key of the block at off. Both steps are bijections,
// so distinct offsets of one stream never share a payload.
func blockKey(seed Seed, off int64) uint64 {
	return fmix64(uint64(seed) ^ fmix64(uint64(off)+golden))
}

// headerCheck is the header's checksum over (seed, offset, length).
func headerCheck(seed Seed, length, off int64) uint32 {
	h := fmix64(uint64(seed) ^ fmix64(uint64(off)^fmix64(uint64(length)+wyP1)))
	return uint32(h ^ h>>32)
}

// payloadWord is word i of the payload whose key is key.
func payloadWord(key uint64, i int) uint64 {
	s := key + uint64(i+1)*wyP0
	hi, lo := bits.Mul64(s, s^wyP1)
	return (hi ^ lo) | nonZero
}

// fillPayload writes the payload with key into dst, which must be payloadSize
// bytes. This loop is the generator's (and the checker's) inner loop.
func fillPayload(dst []byte, key uint64) {
	s := key
	for len(dst) >= 8 {
		s += wyP0
		hi, lo := bits.Mul64(s, s^wyP1)
		binary.LittleEndian.PutUint64(dst, (hi^lo)|nonZero)
		dst = dst[8:]
	}
}

// payloadMatches reports whether b is a prefix of the payload with key. It
// compares without materialising the expected payload, which is what makes
// checking as fast as generating.
func payloadMatches(b []byte, key uint64) bool {
	s := key
	for len(b) >= 8 {
		s += wyP0
		hi, lo := bits.Mul64(s, s^wyP1)
		if binary.LittleEndian.Uint64(b) != (hi^lo)|nonZero {
			return false
		}
		b = b[8:]
	}
	if len(b) > 0 {
		s += wyP0
		hi, lo := bits.Mul64(s, s^wyP1)
		w := (hi ^ lo) | nonZero
		for i := range b {
			if b[i] != byte(w>>(8*i)) {
				return false
			}
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// putHex writes v as len(dst) lowercase hexadecimal digits, most significant
// first.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&15]
		v >>= 4
	}
}

// getHex parses lowercase hexadecimal digits; ok is false on anything else,
// so a flipped bit that turns a digit into another character is caught
// before the checksum is even consulted.
func getHex(b []byte) (v uint64, ok bool) {
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// putHeader writes the header of the block at off into dst[:HeaderSize].
func putHeader(dst []byte, seed Seed, length, off int64) {
	dst = dst[:HeaderSize]
	copy(dst, magic)
	putHex(dst[seedAt:seedAt+16], uint64(seed))
	dst[seedAt+16] = ' '
	putHex(dst[offAt:offAt+16], uint64(off))
	dst[offAt+16] = ' '
	putHex(dst[lenAt:lenAt+16], uint64(length))
	dst[lenAt+16] = ' '
	putHex(dst[checkAt:checkAt+8], uint64(headerCheck(seed, length, off)))
	dst[HeaderSize-1] = '\n'
}

// fillBlock writes the whole block at off of the stream (seed, length) into
// dst[:BlockSize], ignoring where the stream ends; callers cut it short.
func fillBlock(dst []byte, seed Seed, length, off int64) {
	dst = dst[:BlockSize]
	putHeader(dst, seed, length, off)
	fillPayload(dst[HeaderSize:], blockKey(seed, off))
}

// header is a decoded block header.
type header struct {
	seed   Seed
	length int64
	offset int64
}

type headerStatus int

const (
	headerOK headerStatus = iota
	headerMalformed
	headerBadCheck
)

// parseHeader decodes the header at the start of b.
func parseHeader(b []byte) (header, headerStatus) {
	if len(b) < HeaderSize {
		return header{}, headerMalformed
	}
	b = b[:HeaderSize]
	if string(b[:len(magic)]) != magic || b[seedAt+16] != ' ' || b[offAt+16] != ' ' ||
		b[lenAt+16] != ' ' || b[HeaderSize-1] != '\n' {
		return header{}, headerMalformed
	}
	seed, ok1 := getHex(b[seedAt : seedAt+16])
	off, ok2 := getHex(b[offAt : offAt+16])
	length, ok3 := getHex(b[lenAt : lenAt+16])
	check, ok4 := getHex(b[checkAt : checkAt+8])
	if !ok1 || !ok2 || !ok3 || !ok4 || int64(off) < 0 || int64(length) < 0 || off%BlockSize != 0 {
		return header{}, headerMalformed
	}
	h := header{seed: Seed(seed), length: int64(length), offset: int64(off)}
	if uint32(check) != headerCheck(h.seed, h.length, h.offset) {
		return header{}, headerBadCheck
	}
	return h, headerOK
}
