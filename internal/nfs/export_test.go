package nfs

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tandemfs/internal/acl"
)

// An export line reads as in /etc/exports; the first client rule whose
// network holds the caller applies.
func TestExportLines(t *testing.T) {
	e, err := ParseExport("/data 10.0.0.0/8(rw,no_root_squash) 192.168.1.5 *(ro,all_squash,anonuid=7,anongid=8,secure)")
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Net: netip.MustParsePrefix("10.0.0.0/8"), Squash: NoSquash, AnonUID: 65534, AnonGID: 65534},
		{Net: netip.MustParsePrefix("192.168.1.5/32"), ReadOnly: true, AnonUID: 65534, AnonGID: 65534},
		{ReadOnly: true, Squash: AllSquash, AnonUID: 7, AnonGID: 8, Secure: true},
	}
	if e.Path != "/data" || !reflect.DeepEqual(e.Rules, want) {
		t.Fatalf("parsed %+v", e)
	}
	for addr, rule := range map[string]int{"10.1.2.3": 0, "192.168.1.5": 1, "192.168.1.6": 2, "::ffff:10.9.9.9": 0, "fe80::1": 2} {
		got, ok := e.RuleFor(netip.MustParseAddr(addr))
		if !ok || !reflect.DeepEqual(got, want[rule]) {
			t.Errorf("%s gets %+v, want rule %d", addr, got, rule)
		}
	}
	only, _ := ParseExport("/ 10.0.0.0/8(rw)")
	if _, ok := only.RuleFor(netip.MustParseAddr("127.0.0.1")); ok {
		t.Error("an address outside every rule's network is admitted")
	}
}

func TestExportsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exports")
	os.WriteFile(path, []byte("# TandemFS exports\n/ 10.0.0.0/8(rw) \\\n   127.0.0.1(ro)\n\n/scratch *(rw) # everyone\n"), 0o644)
	exports, err := ParseExports(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(exports) != 2 || len(exports[0].Rules) != 2 || exports[1].Path != "/scratch" {
		t.Fatalf("parsed %+v", exports)
	}
	os.WriteFile(path, []byte("/ *(rw)\n/ 10.0.0.0/8(ro)\n"), 0o644)
	if _, err := ParseExports(path); err == nil || !strings.Contains(err.Error(), "exported twice") {
		t.Fatalf("a path exported twice: %v", err)
	}
	os.WriteFile(path, []byte("/ *(rw)\n/x *(bogus)\n"), 0o644)
	if _, err := ParseExports(path); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("an error names its line: %v", err)
	}
}

// root_squash maps uid 0 and gid 0, all_squash everyone, and AUTH_NONE
// is always the anonymous user.
func TestSquash(t *testing.T) {
	rule := Rule{AnonUID: 99, AnonGID: 98}
	alice := &credentials{sys: true, uid: 1000, gid: 1000, gids: []uint32{0, 20}}
	root := &credentials{sys: true, uid: 0, gid: 0, gids: []uint32{5}}
	cases := []struct {
		name   string
		cred   *credentials
		squash Squash
		want   acl.Caller
	}{
		{"root squashed", root, RootSquash, acl.Caller{UID: 99, GIDs: []uint32{98, 5}}},
		{"alice's group 0 squashed", alice, RootSquash, acl.Caller{UID: 1000, GIDs: []uint32{1000, 98, 20}}},
		{"no_root_squash", root, NoSquash, acl.Caller{UID: 0, GIDs: []uint32{0, 5}}},
		{"all_squash", alice, AllSquash, acl.Caller{UID: 99, GIDs: []uint32{98}}},
		{"AUTH_NONE", &credentials{}, NoSquash, acl.Caller{UID: 99, GIDs: []uint32{98}}},
	}
	for _, c := range cases {
		rule.Squash = c.squash
		if got := c.cred.caller(rule); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestHandlesRoundTripAndRefuseOthers(t *testing.T) {
	h := fileHandle{fsid: 0x1122334455667788, export: 1, ino: 1 << 40}
	got, err := decodeHandle(h.encode())
	if err != nil || got != h {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", h, got, err)
	}
	b := h.encode()
	for i, bad := range [][]byte{nil, b[:27], append(b, 0), append([]byte("XF"), b[2:]...), append([]byte{'T', 'F', 2}, b[3:]...)} {
		if _, err := decodeHandle(bad); err == nil {
			t.Errorf("bad handle %d decoded", i)
		}
	}
}

func FuzzDecodeHandle(f *testing.F) {
	f.Add(fileHandle{fsid: 1, export: 1, ino: 2}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHandle(b)
		if err == nil && string(h.encode()) != string(b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, h)
		}
	})
}

func FuzzParseExport(f *testing.F) {
	f.Add("/ 10.0.0.0/8(rw,no_root_squash) *(ro)")
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseExport(line)
		if err == nil && (len(e.Rules) == 0 || !strings.HasPrefix(e.Path, "/")) {
			t.Fatalf("%q parsed to %+v", line, e)
		}
	})
}
