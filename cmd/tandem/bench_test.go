package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"tandemfs/internal/bench"
	"tandemfs/internal/rpc"
)

// runBenchCmd runs `tandem bench ARGS` and returns stdout, stderr and the
// exit status main would give.
func runBenchCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := newBenchCmd()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		errOut.WriteString(err.Error())
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

func TestBenchUsageErrorsExitWithStatus2(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown test":       {[]string{"compare", "--label", "a=" + dir, "--tests", "seq,iops"}, `unknown test "iops"`},
		"size not divisible": {[]string{"seq", dir, "--size", "3M", "--threads", "2"}, "--size 3M cannot be split into 2 files of whole 1M records"},
		"zero threads":       {[]string{"meta", dir, "--threads", "0"}, "thread count 0"},
		"threads not a list": {[]string{"seq", dir, "--threads", "1,two"}, `"two" is not a whole number`},
		"bad label":          {[]string{"compare", "--label", "tandem:/mnt"}, `--label "tandem:/mnt": want NAME=DIR`},
		"label without dir":  {[]string{"compare", "--label", "tandem="}, "want NAME=DIR"},
		"no label":           {[]string{"compare"}, "at least one --label"},
		"bad size":           {[]string{"rand", dir, "--size", "lots"}, `--size: "lots" is not a size`},
		"unknown flag":       {[]string{"seq", dir, "--sise", "1G"}, "unknown flag: --sise"},
		"no directory":       {[]string{"meta"}, "meta needs exactly one directory"},
		"missing directory":  {[]string{"meta", dir + "/absent"}, "absent does not exist"},
		"unknown command":    {[]string{"iops", dir}, `unknown command "iops"`},
	}
	for name, tc := range cases {
		_, stderr, code := runBenchCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit 2 and %q", name, code, stderr, tc.want)
		}
	}
}

func TestBenchSeqPrintsATableOfMBPerSecond(t *testing.T) {
	stdout, stderr, code := runBenchCmd(t, "seq", t.TempDir(), "--size", "2M", "--record", "64K",
		"--threads", "1,2", "--label", "tmp", "--drop-caches=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"THREADS", "tmp", "write", "read", "MB/s", "iozone -i0 -i1 -c -e -w -+n -r 64k -s 1m -t 2"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "tmp seq 2 threads read done") {
		t.Errorf("no progress log on a non-terminal stderr: %q", stderr)
	}
}

func TestBenchCompareJSONHasEveryRunWithParametersAndCommand(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	stdout, stderr, code := runBenchCmd(t, "compare", "--label", "a="+a, "--label", "b="+b, "--tests", "meta,rand",
		"--threads", "2", "--files", "20", "--items", "5", "--file-size", "0,1K",
		"--rand-size", "64K", "--ops", "20", "--json", "--drop-caches=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if len(rep.Runs) != 6 || rep.Runs[0].System != "a" || rep.Runs[5].System != "b" {
		t.Fatalf("%d runs, want a then b, each meta empty, meta 1K and rand", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Command == "" || r.Params.Workers != 2 || len(r.Phases) == 0 {
			t.Errorf("%s %s: command %q, params %+v, phases %v", r.System, r.Group(), r.Command, r.Params, r.Phases)
		}
	}
	if created := rep.Runs[1].Phases[0]; rep.Runs[1].Variant != "1K" || created.Ops != 20 || created.Bytes != 20*1024 {
		t.Errorf("meta 1K create: %+v, want 20 files of 1 KiB", created)
	}
}

// agentSecret writes a secret file shared by a test's driver and agents.
func agentSecret(t *testing.T) (rpc.Secret, string) {
	t.Helper()
	s, err := rpc.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secret")
	if err := rpc.WriteSecretFile(path, s); err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestBenchAgentsNeedASecret(t *testing.T) {
	_, stderr, code := runBenchCmd(t, "meta", "/mnt/anywhere", "--agents", "127.0.0.1:1")
	if code != 2 || !strings.Contains(stderr, "--secret-file") {
		t.Errorf("exit %d, %q; want exit 2 asking for --secret-file", code, stderr)
	}
}

func TestBenchWithAnUnreachableAgentNamesIt(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, secretFile := agentSecret(t)
	_, stderr, code := runBenchCmd(t, "meta", "/mnt/anywhere", "--agents", addr, "--secret-file", secretFile)
	if code != 1 || !strings.Contains(stderr, "agent "+addr+" is unreachable") {
		t.Errorf("exit %d, %q; want exit 1 naming agent %s", code, stderr, addr)
	}
}

func TestBenchDriverSumsTwoAgents(t *testing.T) {
	secret, secretFile := agentSecret(t)
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go (&bench.Agent{Secret: secret}).Serve(ctx, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	stdout, stderr, code := runBenchCmd(t, "seq", t.TempDir(), "--size", "4M", "--threads", "4",
		"--agents", strings.Join(addrs, ","), "--secret-file", secretFile, "--json", "--drop-caches=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Runs[0]
	if len(r.Agents) != 2 || r.Phases[0].Bytes != 4<<20 || r.Phases[0].Workers != 4 {
		t.Errorf("agents %v, write %+v: want 4 MiB by 4 workers over 2 agents", r.Agents, r.Phases[0])
	}
}
