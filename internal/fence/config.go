// Package fence runs external fence agents against a storage server that the
// metadata leader has declared failed, so that a server which is only
// unreachable (not dead) cannot keep writing to its targets after its chains
// have moved on.
//
// Agents follow the conventions of the fence-agents project (fence_ipmilan
// for iDRAC/IPMI, fence_apc for a PDU, ...): the command is run without
// arguments, its options arrive on stdin as key=value lines together with
// action=off (or reboot), and exit status 0 means the server is fenced.
// A server has an ordered list of agents, primary first — the NSS-HA pair of
// the white papers fences with the iDRAC and falls back to the PDU — and the
// first agent that succeeds ends the fence.
//
// The administrator describes the agents in a JSON file read by Load:
//
//	{"timeout": "20s", "action": "off",
//	 "servers": {
//	   "srv1": [{"name": "idrac", "command": "/usr/sbin/fence_ipmilan",
//	             "options": {"ip": "10.0.0.11", "username": "root", "password_script": "/etc/tandem/pw"}},
//	            {"name": "pdu", "command": "/usr/sbin/fence_apc",
//	             "options": {"ip": "10.0.0.50", "plug": "3"}}],
//	   "*":    [...]}}
//
// Keys of "servers" are a storage server's UUID, the host part of its
// address, or "*" for every server not listed otherwise.
package fence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds one agent run when the config names no timeout.
// fence_ipmilan's own power-wait and retries fit well inside it.
const DefaultTimeout = 30 * time.Second

// DefaultAction is what agents are asked to do. "off" rather than "reboot":
// a server that comes back by itself would rejoin with stale chains, so it
// stays off until an administrator has looked at it.
const DefaultAction = "off"

// Wildcard is the "servers" key whose agents fence every server that has no
// entry of its own.
const Wildcard = "*"

// Config is a loaded fence configuration. It is read-only after Load, so
// Fence may run for several servers at once. A nil *Config has no agents.
type Config struct {
	// Timeout bounds each agent run; zero means DefaultTimeout.
	Timeout time.Duration
	// Action is passed to every agent as action=...: "off" or "reboot";
	// empty means DefaultAction.
	Action string
	// Servers maps a server UUID, address host or Wildcard to its agents
	// in the order they are tried.
	Servers map[string][]Agent
}

// Agent is one external fence agent.
type Agent struct {
	// Name identifies the agent in results and logs ("idrac", "pdu").
	Name string
	// Command is the agent's executable, run without arguments.
	Command string
	// Options are written to the agent's stdin as key=value lines. They
	// often hold credentials, which is why they go to stdin and never into
	// argv (visible in ps) or into results and logs.
	Options map[string]string
}

// fileConfig and fileAgent mirror the JSON file; Load checks them and turns
// them into Config and Agent.
type fileConfig struct {
	Timeout string                 `json:"timeout"`
	Action  string                 `json:"action"`
	Servers map[string][]fileAgent `json:"servers"`
}

type fileAgent struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Values may be strings, numbers or booleans, because an
	// administrator writes "plug": 3 as readily as "plug": "3" and both
	// mean the same to the agent; see optionString.
	Options map[string]any `json:"options"`
}

// Load reads and checks the fence configuration at path. Every error names
// the file and what is wrong with it, since an administrator reads it in the
// metadata service's startup log.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fence config: %w", err)
	}
	c, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("fence config %s: %w", path, err)
	}
	return c, nil
}

// parse decodes and checks a fence configuration.
func parse(data []byte) (*Config, error) {
	var f fileConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	// A misspelt key ("comand", "timout") must not silently fall back to
	// a default: an agent that never runs is found out only when a server
	// fails.
	dec.DisallowUnknownFields()
	dec.UseNumber() // so "plug": 3 reaches the agent as 3, not 3.0e+00
	if err := dec.Decode(&f); err != nil {
		return nil, jsonError(data, err)
	}
	// Anything after the object is a mistake (two configs pasted into one
	// file, say), not something to ignore.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the JSON object")
	}
	c := &Config{Timeout: DefaultTimeout, Action: DefaultAction, Servers: map[string][]Agent{}}
	if f.Timeout != "" {
		d, err := time.ParseDuration(f.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bad timeout %q: want a positive duration such as \"20s\"", f.Timeout)
		}
		c.Timeout = d
	}
	if f.Action != "" {
		if f.Action != "off" && f.Action != "reboot" {
			return nil, fmt.Errorf("bad action %q: want \"off\" or \"reboot\"", f.Action)
		}
		c.Action = f.Action
	}
	if len(f.Servers) == 0 {
		return nil, fmt.Errorf("no \"servers\": nothing could be fenced")
	}
	// In key order, so that a file with several mistakes always reports
	// the same one first.
	for _, key := range slices.Sorted(maps.Keys(f.Servers)) {
		agents, err := checkAgents(key, f.Servers[key])
		if err != nil {
			return nil, err
		}
		c.Servers[key] = agents
	}
	return c, nil
}

// checkAgents checks the agents of one "servers" entry.
func checkAgents(key string, fas []fileAgent) ([]Agent, error) {
	if strings.TrimSpace(key) == "" {
		return nil, fmt.Errorf("servers: empty server key (want a UUID, a host or %q)", Wildcard)
	}
	if len(fas) == 0 {
		return nil, fmt.Errorf("servers[%q]: no agents", key)
	}
	agents := make([]Agent, 0, len(fas))
	seen := map[string]int{}
	for i, fa := range fas {
		where := fmt.Sprintf("servers[%q][%d]", key, i)
		if strings.TrimSpace(fa.Command) == "" {
			return nil, fmt.Errorf("%s: empty command", where)
		}
		name := fa.Name
		if name == "" {
			name = filepath.Base(fa.Command)
		}
		if j, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s: duplicate agent name %q (also servers[%q][%d]); results could not tell them apart", where, name, key, j)
		}
		seen[name] = i
		opts := make(map[string]string, len(fa.Options))
		for _, k := range slices.Sorted(maps.Keys(fa.Options)) {
			v, err := optionString(k, fa.Options[k])
			if err == nil {
				err = checkOption(k, v)
			}
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", where, name, err)
			}
			opts[k] = v
		}
		agents = append(agents, Agent{Name: name, Command: fa.Command, Options: opts})
	}
	return agents, nil
}

// optionString turns a decoded JSON option value into the text the agent
// gets.
func optionString(k string, v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", fmt.Errorf("option %q: want a string, number or boolean", k)
}

// checkOption rejects options that cannot be passed as one key=value line.
func checkOption(k, v string) error {
	switch {
	case k == "" || strings.ContainsAny(k, "=\n\r"):
		return fmt.Errorf("bad option key %q", k)
	case strings.ContainsAny(v, "\n\r"):
		// A newline would start a second line on stdin: a password
		// ending in "\naction=on" would turn a fence into a power-on.
		return fmt.Errorf("option %q: value contains a newline", k)
	case k == "action":
		return fmt.Errorf("option \"action\": set \"action\" at the top level, it applies to every agent")
	}
	return nil
}

// jsonError adds the line and column to JSON errors that carry an offset,
// which is how an administrator finds the mistake in the file.
func jsonError(data []byte, err error) error {
	var off int64 = -1
	switch e := err.(type) {
	case *json.SyntaxError:
		off = e.Offset
	case *json.UnmarshalTypeError:
		off = e.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}

// AgentsFor returns the agents for the server with this UUID and address
// (host:port), in the order they are to be tried: the entry for the UUID,
// else the one for the address host, else the Wildcard entry, else none.
// The UUID comes first because several storage servers may share a host.
func (c *Config) AgentsFor(uuid, addr string) []Agent {
	if c == nil {
		return nil
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	for _, key := range []string{uuid, host, Wildcard} {
		if key == "" {
			continue
		}
		if agents, ok := c.Servers[key]; ok {
			// A copy, so a caller cannot reorder another caller's list.
			return slices.Clone(agents)
		}
	}
	return nil
}

func (c *Config) timeout() time.Duration {
	if c == nil || c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func (c *Config) action() string {
	if c == nil || c.Action == "" {
		return DefaultAction
	}
	return c.Action
}
