package nfs

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Squash says which callers a client rule maps to the anonymous user.
type Squash int

const (
	RootSquash Squash = iota // uid 0 and gid 0 (the default, as knfsd)
	NoSquash                 // no_root_squash
	AllSquash                // all_squash: every caller
)

// anonID is the default anonymous user and group (nobody, nogroup).
const anonID = 65534

// Rule is what one client network may do with an export.
type Rule struct {
	Net      netip.Prefix // the client addresses it applies to; not valid: all (`*`)
	ReadOnly bool
	Squash   Squash
	AnonUID  uint32
	AnonGID  uint32
	// Secure asks for a source port below 1024, which only root on the
	// client host can bind (off by default, as NFS-Ganesha).
	Secure bool
	// Unstable answers UNSTABLE writes once they are in the head's
	// write-behind, durable at the client's COMMIT. Off (the default),
	// every write is durable before its reply, and answered FILE_SYNC:
	// a client that does not resend when the write verifier changes
	// (libnfs does not) loses no acknowledged write at a failover.
	Unstable bool
}

// Export is a directory of the file system served to client networks,
// as one line of /etc/exports: `PATH CLIENT(OPTIONS) ...`.
type Export struct {
	Path  string
	Rules []Rule
}

// RuleFor returns the first rule of e whose network holds addr.
func (e *Export) RuleFor(addr netip.Addr) (Rule, bool) {
	addr = addr.Unmap()
	for _, r := range e.Rules {
		if !r.Net.IsValid() || r.Net.Contains(addr) {
			return r, true
		}
	}
	return Rule{}, false
}

// ParseExports reads an exports file: one export per line, `#` starts a
// comment, a trailing `\` continues a line.
func ParseExports(path string) ([]Export, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var exports []Export
	var pending string
	sc := bufio.NewScanner(f)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.HasSuffix(strings.TrimSpace(line), `\`) {
			pending += strings.TrimSuffix(strings.TrimSpace(line), `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := ParseExport(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, lineNo, err)
		}
		exports = append(exports, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return exports, checkExports(exports)
}

// checkExports refuses a path exported twice.
func checkExports(exports []Export) error {
	seen := map[string]bool{}
	for _, e := range exports {
		if seen[e.Path] {
			return fmt.Errorf("%s is exported twice", e.Path)
		}
		seen[e.Path] = true
	}
	return nil
}

// ParseExport parses one export line: an absolute path in the file system
// and one or more client specifications, each an address, a network in
// CIDR form or `*`, followed by options in parentheses. A client without
// options gets the defaults: ro, root_squash.
func ParseExport(line string) (Export, error) {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return Export{}, fmt.Errorf("export %q: want a path and at least one client, as `/ 10.0.0.0/8(rw)`", strings.TrimSpace(line))
	}
	e := Export{Path: fields[0]}
	if !strings.HasPrefix(e.Path, "/") {
		return Export{}, fmt.Errorf("export path %q is not absolute (paths are in the TandemFS namespace, / is its root)", e.Path)
	}
	for _, spec := range fields[1:] {
		r, err := parseClient(spec)
		if err != nil {
			return Export{}, fmt.Errorf("export %s: %w", e.Path, err)
		}
		e.Rules = append(e.Rules, r)
	}
	return e, nil
}

func parseClient(spec string) (Rule, error) {
	who, opts := spec, ""
	if i := strings.IndexByte(spec, '('); i >= 0 {
		if !strings.HasSuffix(spec, ")") {
			return Rule{}, fmt.Errorf("client %q: options must end with )", spec)
		}
		who, opts = spec[:i], spec[i+1:len(spec)-1]
	}
	r := Rule{ReadOnly: true, AnonUID: anonID, AnonGID: anonID}
	var err error
	if r.Net, err = parseNet(who); err != nil {
		return Rule{}, err
	}
	if opts == "" {
		return r, nil
	}
	for _, o := range strings.Split(opts, ",") {
		if err := r.apply(o); err != nil {
			return Rule{}, fmt.Errorf("client %s: %w", who, err)
		}
	}
	return r, nil
}

// parseNet reads `*` (everyone), an address or a network.
func parseNet(who string) (netip.Prefix, error) {
	switch {
	case who == "*" || who == "":
		return netip.Prefix{}, nil
	case strings.Contains(who, "/"):
		p, err := netip.ParsePrefix(who)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("client network %q: %v", who, err)
		}
		return p.Masked(), nil
	default:
		a, err := netip.ParseAddr(who)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("client %q is not an address, a network (CIDR) or * (host names are not resolved)", who)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
}

func (r *Rule) apply(opt string) error {
	name, val, hasVal := strings.Cut(strings.TrimSpace(opt), "=")
	id := func() (uint32, error) {
		n, err := strconv.ParseUint(val, 10, 32)
		if !hasVal || err != nil {
			return 0, fmt.Errorf("option %s needs a numeric id, as %s=65534", name, name)
		}
		return uint32(n), nil
	}
	var err error
	switch name {
	case "rw":
		r.ReadOnly = false
	case "ro":
		r.ReadOnly = true
	case "root_squash":
		r.Squash = RootSquash
	case "no_root_squash":
		r.Squash = NoSquash
	case "all_squash":
		r.Squash = AllSquash
	case "no_all_squash":
		if r.Squash == AllSquash {
			r.Squash = RootSquash
		}
	case "anonuid":
		r.AnonUID, err = id()
	case "anongid":
		r.AnonGID, err = id()
	case "secure":
		r.Secure = true
	case "insecure":
		r.Secure = false
	case "unstable":
		r.Unstable = true
	case "sync", "no_subtree_check", "wdelay", "no_wdelay", "":
		// sync is what the gateway always does; it checks no subtrees.
	case "async":
		return fmt.Errorf("option async is refused: it acknowledges writes before they are stable, and a failover then loses them (the NSS-HA paper's 1,487 checkstream errors); UNSTABLE writes with COMMIT are already buffered safely")
	default:
		return fmt.Errorf("unknown export option %q (known: rw, ro, root_squash, no_root_squash, all_squash, anonuid=N, anongid=N, secure, insecure, sync, unstable)", name)
	}
	return err
}
