package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy in front of a Server that forwards requests at once
// and holds replies for a delay the test sets (SetReplyDelay): with a delay
// longer than a client's timeout, a command runs in Redis in time but its
// reply comes back late. Replies keep their order (a reply read after the
// delay changed waits behind those held before). The first reply of a
// connection (the client's handshake) is never held, so that a client
// dialing while replies are held connects and sends its command. Safe for
// concurrent use; it stops when the test ends.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// StartProxy starts a Proxy on a free loopback port, forwarding to target
// (a host:port), with no delay.
func StartProxy(t TB, target string) *Proxy {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1", target)
}

// StartProxyOn is StartProxy listening on a free port of host (an address
// of this machine, e.g. the host end of a network namespace's veth).
func StartProxyOn(t TB, host, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns a redis:// URL for the proxy, database 0.
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// SetReplyDelay sets how long each reply read from now on is held before
// it is forwarded (0: at once).
func (p *Proxy) SetReplyDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go func() { // requests: at once
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
		}()
		go func() { // replies: delayed
			defer p.wg.Done()
			p.replies(c, s)
			c.Close()
		}()
	}
}

// track records conns to close with the proxy; false if it is closed.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// chunk is a piece of reply and when it may be forwarded.
type chunk struct {
	data []byte
	due  time.Time
}

// replies forwards what the server sends to the client, each piece once
// its delay has passed.
func (p *Proxy) replies(client, server net.Conn) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for first := true; ; {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				due := time.Now()
				if !first {
					due = due.Add(time.Duration(p.delay.Load()))
				}
				first = false
				q <- chunk{buf[:n], due}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.due))
		if _, err := client.Write(c.data); err != nil {
			server.Close()
			for range q { // let the reader end
			}
			return
		}
	}
}

// Drop closes every connection through the proxy now, both sides, as a
// network that resets them would; new connections are accepted as usual.
func (p *Proxy) Drop() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	p.wg.Wait()
}
