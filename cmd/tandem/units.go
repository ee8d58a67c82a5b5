package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseSize reads sizes such as 4096, 64k, 1M, 2MiB, 10G (binary units).
func parseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := uint64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || t == "" {
		return 0, fmt.Errorf("%q is not a size (use e.g. 4096, 64K, 1M, 2G)", s)
	}
	if v > (1<<64-1)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return v * mult, nil
}
