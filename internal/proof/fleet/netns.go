package fleet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
)

// netns is a network namespace joined to this one by a veth pair: an
// instance run inside it reaches Redis only over the veth, at an address
// of the host's end that only the namespace routes to (redisHost). Cut
// turns that route into a blackhole inside the namespace — packets to
// Redis go nowhere, with no reset and no answer (a new connection is
// refused at once by the route) — while its HTTP answers still come back.
type netns struct {
	name         string
	hostIP, nsIP string // the two ends of the veth (/30)
	nsDev        string
	// redisHost and redisPort are the proxy the instance dials.
	redisHost, redisPort string
}

var netnsSeq atomic.Int32

// ipCmd runs ip(8) with args and returns its error with its output.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetns creates the namespace and its veth pair; t's cleanups remove
// them. It needs root and iproute2: without them it fails the run under
// CI=true, and skips it elsewhere with the reason.
func newNetns(t TB) *netns {
	t.Helper()
	n := netnsSeq.Add(1)
	sub := (os.Getpid()*7 + int(n)) % 250
	ns := &netns{
		name:   fmt.Sprintf("sluice-proof-%d-%d", os.Getpid(), n),
		hostIP: fmt.Sprintf("10.213.%d.1", sub),
		nsIP:   fmt.Sprintf("10.213.%d.2", sub),
		nsDev:  fmt.Sprintf("slp%dn", n),
	}
	ns.redisHost = fmt.Sprintf("10.214.%d.1", sub)
	host := fmt.Sprintf("slp%dh", n)
	if err := ipCmd("netns", "add", ns.name); err != nil {
		msg := fmt.Sprintf("fleet: a network namespace is needed for the partition row (root and iproute2): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s", msg)
		}
		t.Skipf("%s", msg)
	}
	t.Cleanup(func() { _ = ipCmd("netns", "del", ns.name) })
	for _, args := range [][]string{
		{"link", "add", host, "type", "veth", "peer", "name", ns.nsDev},
		{"link", "set", ns.nsDev, "netns", ns.name},
		{"addr", "add", ns.hostIP + "/30", "dev", host},
		{"addr", "add", ns.redisHost + "/32", "dev", host},
		{"link", "set", host, "up"},
		{"-n", ns.name, "addr", "add", ns.nsIP + "/30", "dev", ns.nsDev},
		{"-n", ns.name, "link", "set", ns.nsDev, "up"},
		{"-n", ns.name, "link", "set", "lo", "up"},
		{"-n", ns.name, "route", "add", ns.redisHost + "/32", "dev", ns.nsDev},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatalf("fleet: %v", err)
		}
	}
	t.Cleanup(func() { _ = ipCmd("link", "del", host) })
	return ns
}

// addr is host:port on the namespace's end of the veth: nothing else
// listens on that address, so any port is free.
func (ns *netns) addr(port int) string { return net.JoinHostPort(ns.nsIP, fmt.Sprint(port)) }

// command runs bin with args inside the namespace.
func (ns *netns) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.name, bin}, args...)...)
}

// Cut sends every packet from the namespace to Redis into a blackhole;
// Heal routes them over the veth again.
func (ns *netns) Cut() error {
	return ipCmd("-n", ns.name, "route", "replace", "blackhole", ns.redisHost+"/32")
}

// Heal undoes Cut.
func (ns *netns) Heal() error {
	return ipCmd("-n", ns.name, "route", "replace", ns.redisHost+"/32", "dev", ns.nsDev)
}
