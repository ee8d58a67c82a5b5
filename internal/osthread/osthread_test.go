package osthread

import (
	"runtime"
	"testing"
)

func TestOnlyTheGoroutineThatHoldsADedicatedThreadIsToldSo(t *testing.T) {
	if Dedicated() {
		t.Fatal("an unmarked thread counts as dedicated")
	}
	marked := make(chan struct{})
	done := make(chan bool)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		end := Dedicate()
		close(marked)
		<-release
		done <- Dedicated()
		end()
		done <- Dedicated()
	}()
	<-marked
	for range 100 { // other goroutines never run on the held thread
		if Dedicated() {
			t.Fatal("a goroutine other than the holder counts as dedicated")
		}
		runtime.Gosched()
	}
	close(release)
	if !<-done {
		t.Fatal("the holder of a marked thread is not told so")
	}
	if <-done {
		t.Fatal("still dedicated after release")
	}
}
