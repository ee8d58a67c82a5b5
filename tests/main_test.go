package tests

import (
	"os"
	"testing"

	"tandemfs/internal/testcluster"
)

// TestMain removes the tandem binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testcluster.RemoveBinary()
	os.Exit(code)
}
