package shedgrpc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluice-rl/sluice/shed"
)

func TestUnaryInterceptor(t *testing.T) {
	s, err := shed.New(shed.Config{
		Priority: shed.PriorityConfig{Routes: []shed.Route{{Prefix: "/grpc.health.v1.Health/", Max: shed.Critical}}},
		Worker:   &shed.WorkerConfig{MaxInFlight: 2}, // default may hold 1 (0.8 × 2), critical 2
	}, shed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("block")) > 0 {
			entered <- struct{}{}
			<-release
		}
		return h(ctx, req)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryServerInterceptor(s, Options{}), block))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///buf", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	done := make(chan error, 1)
	go func() {
		_, err := client.Check(metadata.AppendToOutgoingContext(ctx, "block", "1"), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	<-entered
	var trailer metadata.MD
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "worker_utilization") {
		t.Fatalf("second default call: %v, want Unavailable naming worker_utilization", err)
	}
	if got := trailer.Get(PushbackKey); len(got) != 1 || got[0] != "1000" {
		t.Errorf("trailer %s = %v, want [1000]", PushbackKey, got)
	}
	if got := trailer.Get(LayerKey); len(got) != 1 || got[0] != "worker_utilization" {
		t.Errorf("trailer %s = %v, want [worker_utilization]", LayerKey, got)
	}
	// The route lets callers raise themselves to critical, which has room.
	if _, err := client.Check(metadata.AppendToOutgoingContext(ctx, DefaultMetadataKey, "critical"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("critical call: %v, want OK", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("blocked call: %v", err)
	}
	st := s.Stats()
	if st.InFlight != 0 || st.Shed[shed.LayerWorker][shed.Default] != 1 || st.Admitted[shed.Critical] != 1 {
		t.Errorf("stats: in flight %d, shed %v, admitted %v; want 0, one default shed, one critical admitted",
			st.InFlight, st.Shed[shed.LayerWorker], st.Admitted)
	}
}

func TestStreamInterceptor(t *testing.T) {
	s, err := shed.New(shed.Config{
		Priority: shed.PriorityConfig{Max: shed.Critical},
		Worker:   &shed.WorkerConfig{MaxInFlight: 1}, // only critical fits (default's share is 0.8 of 1)
	}, shed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StreamInterceptor(StreamServerInterceptor(s, Options{MetadataKey: "prio"})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///buf", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("default stream: %v, want Unavailable", err)
	}
	w, err = client.Watch(metadata.AppendToOutgoingContext(ctx, "prio", "critical"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Errorf("critical stream: %v, want a first message", err)
	}
	if got := s.Stats().InFlight; got != 1 {
		t.Errorf("in flight during the stream: %d, want 1", got)
	}
}

// TestUnaryOutcomes: the outcome each way a call ends gives the shedder. A
// server failure is Dropped (no latency sample, a sign to lower the
// adaptive limit), however fast; a success or a client error Succeeded; a
// rate-limit refusal or a client that left Ignored.
func TestUnaryOutcomes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	late, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	tests := []struct {
		name string
		code codes.Code
		ctx  context.Context
		want shed.Outcome
	}{
		{"OK", codes.OK, nil, shed.Succeeded},
		{"NotFound", codes.NotFound, nil, shed.Succeeded},
		{"Unknown (a plain error)", codes.Unknown, nil, shed.Succeeded},
		{"Unavailable", codes.Unavailable, nil, shed.Dropped},
		{"Internal", codes.Internal, nil, shed.Dropped},
		{"DeadlineExceeded", codes.DeadlineExceeded, nil, shed.Dropped},
		{"ResourceExhausted", codes.ResourceExhausted, nil, shed.Ignored},
		{"client gone", codes.Canceled, cancelled, shed.Ignored},
		{"past the client's deadline", codes.OK, late, shed.Dropped},
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Do"}
	for _, tt := range tests {
		s, err := shed.New(shed.Config{Adaptive: &shed.AdaptiveConfig{}}, shed.Options{})
		if err != nil {
			t.Fatal(err)
		}
		in := UnaryServerInterceptor(s, Options{})
		ctx := tt.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		for range 10 {
			_, err := in(ctx, nil, info, func(context.Context, any) (any, error) {
				if tt.code == codes.OK {
					return "ok", nil
				}
				return nil, status.Error(tt.code, "from the handler")
			})
			if status.Code(err) != tt.code {
				t.Fatalf("%s: call: %v, want %v", tt.name, err, tt.code)
			}
		}
		var want [shed.NumOutcomes]uint64
		want[tt.want] = 10
		if st := s.Stats(); st.Finished != want || st.Adaptive.InFlight != 0 {
			t.Errorf("ten %s calls: finished %v, %d in flight; want %v (%v), none", tt.name, st.Finished, st.Adaptive.InFlight, want, tt.want)
		}
	}
}
