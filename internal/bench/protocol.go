package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// ProtocolVersion is the version of the driver–agent protocol. Both sides
// send it in every message and refuse any other.
const ProtocolVersion = 1

// MaxMessage bounds one message; the protocol carries only commands and
// per-worker results, so a larger one is a bug or a stranger talking.
const MaxMessage = 1 << 20

// Requests the driver sends.
const (
	opHello      = "hello"
	opPhase      = "phase"
	opDropCaches = "drop-caches"
)

// request is one command from the driver to an agent.
type request struct {
	Version int    `json:"v"`
	Op      string `json:"op"`
	Spec    *Spec  `json:"spec,omitempty"`
	Phase   string `json:"phase,omitempty"`
	First   int    `json:"first,omitempty"` // the agent runs workers First … First+Count-1
	Count   int    `json:"count,omitempty"`
}

// response is an agent's answer to one request.
type response struct {
	Version int            `json:"v"`
	Host    string         `json:"host"`
	Error   string         `json:"error,omitempty"`
	Results []WorkerResult `json:"results,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
}

// writeMessage sends v as a 4-byte big-endian length and JSON.
func writeMessage(conn net.Conn, v any, timeout time.Duration) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > MaxMessage {
		return fmt.Errorf("message of %d bytes exceeds the %d-byte limit", len(body), MaxMessage)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err = conn.Write(append(msg, body...))
	return err
}

// readMessage reads one message into v, refusing oversized ones before
// reading their body.
func readMessage(conn net.Conn, v any, timeout time.Duration) error {
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxMessage {
		return fmt.Errorf("message of %d bytes exceeds the %d-byte limit", n, MaxMessage)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("bad message: %w", err)
	}
	return nil
}
