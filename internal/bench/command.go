package bench

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Equivalent is the iozone or mdtest command line that measures what a
// spec measures, in the form the white papers give it. agents > 0 adds
// the client list that IOzone (-+m) or mpirun (--hostfile) would use.
func Equivalent(s Spec, agents int) string {
	switch s.Test {
	case TestSeq:
		return seqCommand(s, agents)
	case TestRand:
		return randCommand(s, agents)
	case TestMeta:
		return metaCommand(s, agents)
	}
	return ""
}

// iozoneSize writes a size with iozone's k/m/g suffixes.
func iozoneSize(n uint64) string {
	return strings.ToLower(FormatSize(n))
}

func clientList(agents int) string {
	if agents == 0 {
		return ""
	}
	return " -+m clientlist"
}

func seqCommand(s Spec, agents int) string {
	return fmt.Sprintf("cd %s && iozone -i0 -i1 -c -e -w -+n -r %s -s %s -t %d%s",
		filepath.Dir(s.Root), iozoneSize(s.Record), iozoneSize(s.FileSize), s.Workers, clientList(agents))
}

func randCommand(s Spec, agents int) string {
	direct := " -I"
	if !s.Direct {
		direct = ""
	}
	stop := fmt.Sprintf(" (tandem stops each phase after %s; iozone after -s/-r operations)", s.Duration)
	if s.Ops > 0 {
		stop = fmt.Sprintf(" (tandem does %d operations per thread; iozone -s/-r)", s.Ops)
	}
	return fmt.Sprintf("cd %s && iozone -i0 -w -+n -r 1m -s %s -t %d%s && iozone -i2 -w -c -O%s -+n -r %s -s %s -t %d%s%s",
		filepath.Dir(s.Root), iozoneSize(s.FileSize), s.Workers, clientList(agents),
		direct, iozoneSize(s.Record), iozoneSize(s.FileSize), s.Workers, clientList(agents), stop)
}

func metaCommand(s Spec, agents int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mpirun -np %d", s.Workers)
	if agents > 0 {
		b.WriteString(" --hostfile hosts")
	}
	fmt.Fprintf(&b, " mdtest -i 1 -F -L -u -z %d -b %d -I %d", s.Depth, s.Branch, s.Items)
	if s.Fsync {
		b.WriteString(" -y")
	}
	if s.FileSize > 0 {
		fmt.Fprintf(&b, " -w %d -e %d", s.FileSize, s.FileSize)
	}
	fmt.Fprintf(&b, " -d %s", filepath.Dir(s.Root))
	return b.String()
}
