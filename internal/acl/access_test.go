package acl

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tandemfs/internal/testenv"
)

// Permits answers as the Linux kernel does: random modes, owners and
// ACLs are set on files and directories of a local file system with
// setfacl, and random callers (setpriv as another user and groups) ask
// for random access with test -r/-w/-x; every answer must match.
func TestPermitsAnswersAsTheKernelDoes(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "setfacl")
	testenv.RequireCommand(t, "setpriv")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []uint32{1001, 1002, 1003, 1004}
	pick := func() uint32 { return ids[rng.IntN(len(ids))] }
	perm := func() uint16 { return uint16(rng.IntN(8)) }
	rwx := func(p uint16) string {
		b := []byte("---")
		for i, c := range "rwx" {
			if p&(4>>i) != 0 {
				b[i] = byte(c)
			}
		}
		return string(b)
	}
	cases := 0
	for n := 0; n < 40; n++ {
		path := filepath.Join(dir, fmt.Sprint("f", n))
		isDir := n%4 == 0
		if isDir {
			os.Mkdir(path, 0o700)
		} else {
			os.WriteFile(path, nil, 0o600)
		}
		owner, group := pick(), pick()
		os.Chown(path, int(owner), int(group))
		mode := uint32(rng.IntN(0o1000))
		os.Chmod(path, os.FileMode(mode))
		// Half the files get named entries and a mask.
		var a ACL
		if n%2 == 1 {
			a = ACL{{UserObj, uint16(mode>>6) & 7, undefinedID}}
			u := pick()
			a = append(a, Entry{User, perm(), u})
			a = append(a, Entry{GroupObj, perm(), undefinedID})
			g := pick()
			a = append(a, Entry{Group, perm(), g})
			a = append(a, Entry{Mask, perm(), undefinedID}, Entry{Other, uint16(mode) & 7, undefinedID})
			spec := fmt.Sprintf("u::%s,u:%d:%s,g::%s,g:%d:%s,m::%s,o::%s", rwx(a[0].Perm), u, rwx(a[1].Perm),
				rwx(a[2].Perm), g, rwx(a[3].Perm), rwx(a[4].Perm), rwx(a[5].Perm))
			if out, err := exec.Command("setfacl", "--set", spec, path).CombinedOutput(); err != nil {
				t.Fatalf("setfacl --set %s: %v: %s", spec, err, out)
			}
			var st syscall.Stat_t
			syscall.Stat(path, &st)
			mode = st.Mode & 0o777
		}
		typ := uint32(0o100000)
		if isDir {
			typ = 0o040000
		}
		f := &File{Mode: typ | mode, UID: owner, GID: group, AccessACL: a}
		for k := 0; k < 6; k++ {
			c := &Caller{UID: pick(), GIDs: []uint32{pick()}}
			if rng.IntN(2) == 0 {
				c.GIDs = append(c.GIDs, pick())
			}
			want := []uint16{MayRead, MayWrite, MayExec}[rng.IntN(3)]
			flag := map[uint16]string{MayRead: "-r", MayWrite: "-w", MayExec: "-x"}[want]
			groups := make([]string, len(c.GIDs))
			for i, g := range c.GIDs {
				groups[i] = fmt.Sprint(g)
			}
			cmd := exec.Command("setpriv", "--reuid", fmt.Sprint(c.UID), "--regid", fmt.Sprint(c.GIDs[0]),
				"--groups", strings.Join(groups, ","), "test", flag, path)
			kernel := cmd.Run() == nil
			if got := Permits(f, c, want); got != kernel {
				out, _ := exec.Command("getfacl", "-n", path).Output()
				t.Fatalf("%s (mode %o, owner %d, group %d), caller %+v, test %s: Permits says %v, the kernel %v\n%s",
					path, f.Mode, owner, group, *c, flag, got, kernel, out)
			}
			cases++
		}
	}
	// Root, as CAP_DAC_OVERRIDE lets it.
	f := &File{Mode: 0o100000, UID: 1001, GID: 1001}
	if !Permits(f, &Caller{UID: 0}, MayRead|MayWrite) || Permits(f, &Caller{UID: 0}, MayExec) {
		t.Fatal("root reads and writes a mode 000 file, and executes it only with an execute bit set")
	}
	if !Permits(&File{Mode: 0o040000, UID: 1001}, &Caller{UID: 0}, MayExec|MayWrite) {
		t.Fatal("root searches and writes any directory")
	}
	t.Logf("%d checks agreed with the kernel", cases)
}

func TestKillSuidGidFollowsPOSIX(t *testing.T) {
	cases := []struct{ in, want uint32 }{
		{syscall.S_IFREG | 0o4755, syscall.S_IFREG | 0o755},  // set-user-ID goes
		{syscall.S_IFREG | 0o2755, syscall.S_IFREG | 0o755},  // set-group-ID with group execute goes
		{syscall.S_IFREG | 0o2745, syscall.S_IFREG | 0o2745}, // without group execute it marks mandatory locking: stays
		{syscall.S_IFREG | 0o644, syscall.S_IFREG | 0o644},
	}
	for _, c := range cases {
		if got := KillSuidGid(c.in); got != c.want {
			t.Errorf("KillSuidGid(%o) = %o, want %o", c.in, got, c.want)
		}
	}
}
