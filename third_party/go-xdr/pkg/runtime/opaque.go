package runtime

import (
	"fmt"
	"io"
	"slices"
)

func readPadding(r io.Reader, nTotal int64) (int64, error) {
	paddingToSkip := nTotal % 4
	if paddingToSkip == 0 {
		return nTotal, nil
	}

	var padding [4]byte
	paddingSlice := padding[paddingToSkip:]
	nPadding, err := io.ReadFull(r, paddingSlice)
	nTotal += int64(nPadding)
	if err != nil {
		if err == io.EOF {
			return nTotal, io.ErrUnexpectedEOF
		}
		return nTotal, err
	}
	if padding != [4]byte{} {
		return nTotal, fmt.Errorf("padding contains non-zero values %v", paddingSlice)
	}
	return nTotal, nil
}

var zeroPadding [4]byte

func writePadding(w io.Writer, n int64) (int64, error) {
	paddingToSkip := n % 4
	if paddingToSkip == 0 {
		return n, nil
	}
	nPadding, err := w.Write(zeroPadding[paddingToSkip:])
	return n + int64(nPadding), err
}

// ReadFixedLengthOpaque reads an XDR encoded fixed length opaque value.
func ReadFixedLengthOpaque(r io.Reader, b []byte) (int64, error) {
	nData, err := io.ReadFull(r, b)
	if err != nil {
		return int64(nData), err
	}
	return readPadding(r, int64(nData))
}

// WriteFixedLengthOpaque writes an XDR encoded fixed length opaque value.
func WriteFixedLengthOpaque(w io.Writer, b []byte) (int64, error) {
	nData, err := w.Write(b)
	if err != nil {
		return int64(nData), err
	}
	return writePadding(w, int64(nData))
}

func copyVariableLengthOpaque(r io.Reader, w io.Writer, maximumSizeBytes uint32) (int64, error) {
	length, nTotal, err := ReadUnsignedInt(r)
	if err != nil || length == 0 {
		return nTotal, err
	}
	if length > maximumSizeBytes {
		return nTotal, fmt.Errorf("size of %d bytes exceeds field's maximum of %d bytes", length, maximumSizeBytes)
	}

	nCopied, err := io.CopyN(w, r, int64(length))
	nTotal += nCopied
	if err != nil {
		if err == io.EOF {
			return nTotal, io.ErrUnexpectedEOF
		}
		return nTotal, err
	}
	return readPadding(r, nTotal)
}

// opaqueStep bounds what ReadVariableLengthOpaque allocates before the
// bytes arrive.
const opaqueStep = 1 << 20

// ReadVariableLengthOpaque reads an XDR encoded variable length opaque value.
//
// TandemFS: into a slice of the value's length, grown in steps of at most
// opaqueStep as its bytes arrive (a length a peer claims but does not
// send costs no memory up front), instead of a bytes.Buffer: for a 1 MiB
// NFS WRITE the buffer grew by doubling to 2 MiB, zeroing each step, and
// that and its garbage were a third of the gateway's CPU.
func ReadVariableLengthOpaque(r io.Reader, maximumSizeBytes uint32) ([]byte, int64, error) {
	length, nTotal, err := ReadUnsignedInt(r)
	if err != nil || length == 0 {
		return nil, nTotal, err
	}
	if length > maximumSizeBytes {
		return nil, nTotal, fmt.Errorf("size of %d bytes exceeds field's maximum of %d bytes", length, maximumSizeBytes)
	}
	b := make([]byte, 0, min(length, opaqueStep))
	for uint32(len(b)) < length {
		step := int(min(length-uint32(len(b)), opaqueStep))
		b = slices.Grow(b, step)
		n, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+n]
		nTotal += int64(n)
		if err != nil {
			if err == io.EOF {
				return nil, nTotal, io.ErrUnexpectedEOF
			}
			return nil, nTotal, err
		}
	}
	nTotal, err = readPadding(r, nTotal)
	if err != nil {
		return nil, nTotal, err
	}
	return b, nTotal, nil
}

// WriteVariableLengthOpaque writes an XDR encoded variable length opaque value.
func WriteVariableLengthOpaque(w io.Writer, maximumSizeBytes uint32, b []byte) (int64, error) {
	if uint64(len(b)) > uint64(maximumSizeBytes) {
		return 0, fmt.Errorf("size of %d bytes exceeds field's maximum of %d bytes", len(b), maximumSizeBytes)
	}

	nTotal, err := WriteUnsignedInt(w, uint32(len(b)))
	if err != nil {
		return nTotal, err
	}

	nString, err := w.Write(b)
	nTotal += int64(nString)
	if err != nil {
		return nTotal, err
	}
	return writePadding(w, nTotal)
}
