package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func query(t *testing.T, url string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, "SELECT count(*) FROM kv").Scan(&n)
	return n, err
}

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	url := s.NewDatabase(t)
	s.Exec(t, url, "CREATE TABLE kv (k text PRIMARY KEY)")
	s.Exec(t, url, "INSERT INTO kv VALUES ('a'), ('b')")
	if n, err := query(t, url); err != nil || n != 2 {
		t.Fatalf("count = %d, %v; want 2, nil", n, err)
	}
	s.Kill()
	if _, err := query(t, url); err == nil {
		t.Fatal("query after Kill succeeded; want an error")
	}
	s.Start()
	if n, err := query(t, url); err != nil || n != 2 {
		t.Fatalf("after restart: count = %d, %v; want 2, nil (committed rows survive a crash)", n, err)
	}
	other := s.NewDatabase(t)
	if other == url {
		t.Fatalf("NewDatabase returned %s twice", url)
	}
}
