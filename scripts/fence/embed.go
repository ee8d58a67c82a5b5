// Package fenceagents carries the fence agents of scripts/fence inside the
// tandem binary, so that `tandem up` can install one for a one-machine
// cluster wherever the binary was copied.
package fenceagents

import _ "embed"

// Kill is fence_tandem_kill: it fences by killing the process of a PID
// file (or every process of a network namespace).
//
//go:embed fence_tandem_kill
var Kill []byte
