package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tandemfs/internal/testcluster"
	"tandemfs/internal/testenv"
)

// POSIX ACLs behave as on ext4 and XFS: setfacl and getfacl work with
// named users and groups and a mask, setting an ACL sets the mode bits,
// chmod sets the mask, a directory's default ACL is inherited instead of
// the umask, and every mount of the cluster enforces the same ACL for
// users other than root.

// run runs a command as root and returns what it printed on stdout.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if e, ok := err.(*exec.ExitError); ok {
			stderr = e.Stderr
		}
		t.Fatalf("%s %q: %v\n%s%s", name, args, err, out, stderr)
	}
	return string(out)
}

// sh runs a shell script as root with its arguments as $1, $2, ...
func sh(t *testing.T, script string, args ...string) {
	t.Helper()
	run(t, "/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
}

// facl is getfacl's answer for path, with numeric ids and no header.
func facl(t *testing.T, path string) string {
	t.Helper()
	return run(t, "getfacl", "-n", "--omit-header", path)
}

func modeOf(t *testing.T, path string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

func TestPOSIXACLs(t *testing.T) {
	testenv.RequireCommand(t, "setfacl")
	c := testcluster.Start(t)
	root := c.Mount()
	dir := func(t *testing.T) string {
		d := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
		return d
	}

	t.Run("cp -a and cp -p keep the modes of what they copy", func(t *testing.T) {
		d := dir(t)
		src := t.TempDir()
		os.MkdirAll(filepath.Join(src, "tree", "sub"), 0o755)
		os.WriteFile(filepath.Join(src, "tree", "sub", "f"), []byte("x"), 0o644)
		os.Chmod(filepath.Join(src, "tree", "sub"), 0o755)
		os.Chmod(filepath.Join(src, "tree", "sub", "f"), 0o644)
		run(t, "cp", "-a", filepath.Join(src, "tree"), filepath.Join(d, "a"))
		run(t, "cp", "-pr", filepath.Join(src, "tree"), filepath.Join(d, "p"))
		for _, copy := range []string{"a", "p"} {
			if m := modeOf(t, filepath.Join(d, copy, "sub")); m != 0o755 {
				t.Errorf("cp -%s: directory mode %o, want 755", copy, m)
			}
			if m := modeOf(t, filepath.Join(d, copy, "sub", "f")); m != 0o644 {
				t.Errorf("cp -%s: file mode %o, want 644", copy, m)
			}
		}
		if err := asNobody(`cat "$1" >/dev/null`, filepath.Join(d, "a", "sub", "f")); err != nil {
			t.Fatalf("another user cannot read a 644 file copied with cp -a: %v", err)
		}
	})

	t.Run("named entries and a mask, shown in the mode group bits", func(t *testing.T) {
		f := filepath.Join(dir(t), "f")
		mustWrite(t, f, []byte("x"))
		os.Chmod(f, 0o600)
		run(t, "setfacl", "-m", "u:1000:rw,g:50:r", f)
		want := "user::rw-\nuser:1000:rw-\ngroup::---\ngroup:50:r--\nmask::rw-\nother::---\n\n"
		if got := facl(t, f); got != want {
			t.Fatalf("getfacl:\n%s\nwant:\n%s", got, want)
		}
		if m := modeOf(t, f); m != 0o660 {
			t.Fatalf("mode %o, want 660 (the mask in the group bits)", m)
		}
		// chmod sets the mask; the named entries keep their bits.
		os.Chmod(f, 0o640)
		want = "user::rw-\nuser:1000:rw-\t#effective:r--\ngroup::---\ngroup:50:r--\nmask::r--\nother::---\n\n"
		if got := facl(t, f); got != want {
			t.Fatalf("getfacl after chmod 640:\n%s\nwant:\n%s", got, want)
		}
		// Removing the extended entries leaves the group entry's own
		// bits, as on ext4.
		run(t, "setfacl", "-b", f)
		if got := facl(t, f); got != "user::rw-\ngroup::---\nother::---\n\n" || modeOf(t, f) != 0o600 {
			t.Fatalf("getfacl after setfacl -b:\n%s", got)
		}
		if out, err := exec.Command("getfattr", "-n", "system.posix_acl_access", f).CombinedOutput(); err == nil {
			t.Fatalf("an ACL equal to the mode is still stored:\n%s", out)
		}
	})

	t.Run("an ACL set by an owner outside the file's group clears set-group-ID", func(t *testing.T) {
		f := filepath.Join(dir(t), "sgid")
		mustWrite(t, f, []byte("x"))
		os.Chown(f, 65534, 0) // nobody's file, in root's group
		// syscall.Chmod: os.Chmod takes set-group-ID as os.ModeSetgid.
		if err := syscall.Chmod(f, 0o2775); err != nil || modeOf(t, f) != 0o2775 {
			t.Fatalf("chmod 2775: %v, mode %o", err, modeOf(t, f))
		}
		if err := asNobody(`setfacl -m u:1000:r "$1"`, f); err != nil {
			t.Fatalf("nobody cannot set an ACL on its own file: %v", err)
		}
		if m := modeOf(t, f); m&0o2000 != 0 {
			t.Fatalf("mode %o: set-group-ID kept after an ACL change by a user outside the group", m)
		}
		// Root is allowed to keep it.
		if err := syscall.Chmod(f, 0o2775); err != nil {
			t.Fatal(err)
		}
		run(t, "setfacl", "-m", "u:1001:r", f)
		if m := modeOf(t, f); m&0o2000 == 0 {
			t.Fatalf("mode %o: root's ACL change cleared set-group-ID", m)
		}
	})

	t.Run("a default ACL is inherited by new files and directories, not the umask", func(t *testing.T) {
		d := dir(t)
		run(t, "setfacl", "-d", "-m", "u:1000:rwx,g::rx,o::-", d)
		sh(t, `umask 077; echo x > "$1/f"; mkdir "$1/sub"; echo y > "$1/sub/g"`, d)
		wantFile := "user::rw-\nuser:1000:rwx\t#effective:rw-\ngroup::r-x\t#effective:r--\nmask::rw-\nother::---\n\n"
		for _, f := range []string{d + "/f", d + "/sub/g"} {
			if got := facl(t, f); got != wantFile {
				t.Fatalf("getfacl %s:\n%s\nwant:\n%s", f, got, wantFile)
			}
			if m := modeOf(t, f); m != 0o660 {
				t.Fatalf("%s: mode %o, want 660", f, m)
			}
		}
		wantDir := "user::rwx\nuser:1000:rwx\ngroup::r-x\nmask::rwx\nother::---\n" +
			"default:user::rwx\ndefault:user:1000:rwx\ndefault:group::r-x\ndefault:mask::rwx\ndefault:other::---\n\n"
		if got := facl(t, d+"/sub"); got != wantDir {
			t.Fatalf("getfacl of the new directory:\n%s\nwant:\n%s", got, wantDir)
		}
		// Once the default ACL is removed, the umask applies again.
		run(t, "setfacl", "-k", d)
		sh(t, `umask 027; echo z > "$1/h"`, d)
		if m := modeOf(t, d+"/h"); m != 0o640 {
			t.Fatalf("mode %o, want 640 from the umask", m)
		}
		// A default ACL belongs to directories only.
		if out, err := exec.Command("setfacl", "-d", "-m", "u:1000:r", d+"/f").CombinedOutput(); err == nil {
			t.Fatalf("setfacl -d on a file succeeded:\n%s", out)
		}
	})

	t.Run("every mount enforces the same ACL for other users", func(t *testing.T) {
		d := dir(t)
		mnt2 := secondMount(t, c)
		// Another user must reach the second mount point.
		os.Chmod(filepath.Dir(mnt2), 0o755)
		os.Chmod(filepath.Dir(filepath.Dir(mnt2)), 0o755)
		other := filepath.Join(mnt2, filepath.Base(d))
		f := filepath.Join(d, "secret")
		mustWrite(t, f, []byte("secret"))
		os.Chmod(f, 0o600)
		there := filepath.Join(other, "secret")
		read := func() error { return asNobody(`cat "$1" >/dev/null`, there) }
		write := func() error { return asNobody(`echo more >> "$1"`, there) }
		if read() == nil {
			t.Fatal("nobody read a 600 file")
		}
		// Granted on the first mount, the read succeeds on the second.
		run(t, "setfacl", "-m", "u:65534:rw", f)
		showsSoon(t, "nobody reads with u:65534:rw", func() bool { return read() == nil })
		if err := write(); err != nil {
			t.Fatalf("nobody cannot write with u:65534:rw: %v", err)
		}
		// The mask limits the named user.
		run(t, "setfacl", "-m", "m::r", f)
		showsSoon(t, "nobody's writes refused under mask r--", func() bool { return write() != nil })
		if err := read(); err != nil {
			t.Fatalf("nobody cannot read under mask r--: %v", err)
		}
		// A named group counts for the group's members.
		run(t, "setfacl", "-x", "u:65534", f)
		run(t, "setfacl", "-m", "g:65534:r", f)
		showsSoon(t, "a member of group 65534 reads with g:65534:r", func() bool { return read() == nil })
		run(t, "setfacl", "-b", f)
		showsSoon(t, "nobody's reads refused once the ACL is removed", func() bool { return read() != nil })
		// A directory's ACL governs search and creation in it.
		sub := filepath.Join(d, "private")
		os.Mkdir(sub, 0o700)
		mine := filepath.Join(other, "private", "mine")
		create := func() error { return asNobody(`echo x > "$1"`, mine) }
		if create() == nil {
			t.Fatal("nobody created a file in a 700 root directory")
		}
		run(t, "setfacl", "-m", "u:65534:rwx", sub)
		showsSoon(t, "nobody creates a file with u:65534:rwx on the directory", func() bool { return create() == nil })
	})
}
