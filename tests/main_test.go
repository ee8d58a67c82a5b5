package tests

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"tandemfs/internal/client"
	"tandemfs/internal/rpc"
	"tandemfs/internal/testcluster"
)

// TestMain removes the tandem binary the tests built. Run with
// lockHolderEnv set, the test binary is instead a process that holds a
// POSIX lock until it is killed (locks_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(lockHolderEnv); path != "" {
		holdLock(path)
	}
	code := m.Run()
	testcluster.RemoveBinary()
	os.Exit(code)
}

// lockHolderEnv names the file a lock-holding helper process locks.
const lockHolderEnv = "TANDEM_TEST_HOLD_LOCK"

// holdLock write-locks the whole file, says so on stdout and waits to be
// killed.
func holdLock(path string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK}
		err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Hour)
	os.Exit(0)
}

// envCount is a positive number from the environment, or def.
func envCount(t *testing.T, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", name, s)
		}
		return n
	}
	return def
}

// envSeed is a seed from the environment, or the clock.
func envSeed(t *testing.T, name string) uint64 {
	if s := os.Getenv(name); s != "" {
		var n uint64
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatalf("%s=%q: want a number", name, s)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// asNobody runs a shell script as user and group 65534, with its
// arguments as $1, $2, ...
func asNobody(script string, args ...string) error {
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.Run()
}

// libraryClient is a TandemFS client library connected to c, closed when
// the test ends, and the cluster's secret.
func libraryClient(t testing.TB, c *testcluster.Cluster) (*client.Client, rpc.Secret) {
	t.Helper()
	secret, err := rpc.ReadSecretFile(c.Layout.SecretFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{MetaAddr: c.Layout.MetaAddr, Secret: secret, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, secret
}
