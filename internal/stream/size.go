package stream

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte count: a plain number of bytes ("4096"), or a
// number followed by a binary unit k, m, g or t in either case, optionally
// spelt KiB, MiB, GiB, TiB ("64k", "10G", "1TiB"). Units are powers of 1024
// because that is what dd and the papers' "100G" files mean.
func ParseSize(s string) (int64, error) {
	bad := func() (int64, error) {
		return 0, fmt.Errorf("invalid size %q: want a byte count such as 4096, 64k, 10G or 1TiB", s)
	}
	num := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "ib")
	shift := 0
	if num != "" {
		switch num[len(num)-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		case 't', 'T':
			shift = 40
		}
	}
	if shift > 0 {
		num = num[:len(num)-1]
	} else if num != s {
		return bad() // "iB" without a unit letter
	}
	if num == "" || num[0] == '+' || num[0] == '-' {
		return bad()
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v > math.MaxInt64>>shift {
		return bad()
	}
	return v << shift, nil
}

// FormatSize renders a byte count for people: "512 B", "4 KiB", "87.45 GiB".
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	return s + " " + units[i:i+1] + "iB"
}
