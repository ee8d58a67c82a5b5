package runtime

import (
	"io"
	"strings"
)

// TandemFS: XDR strings (RFC 4506, section 4.11) are read and written as
// the bytes they are, not refused unless ASCII. NFSv3 file names and
// paths are such strings, and on a POSIX file system a name is any
// bytes but '/' and NUL: Linux's NFS server and client pass UTF-8 and
// other encodings through, and so must TandemFS's gateway.

// ReadASCIIString reads an XDR encoded string value.
func ReadASCIIString(r io.Reader, maximumSizeBytes uint32) (string, int64, error) {
	var builder strings.Builder
	n, err := copyVariableLengthOpaque(r, &builder, maximumSizeBytes)
	if err != nil {
		return "", n, err
	}
	return builder.String(), n, err
}

// WriteASCIIString writes an XDR encoded string value.
func WriteASCIIString(w io.Writer, maximumSizeBytes uint32, s string) (int64, error) {
	return WriteVariableLengthOpaque(w, maximumSizeBytes, []byte(s))
}
