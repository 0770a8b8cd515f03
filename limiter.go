package sluice

import (
	"context"
	"fmt"
	"time"
)

// Limiter is a keyed rate limiter over any Store: one Limit, many keys. It is
// shaped after golang.org/x/time/rate.Limiter, but every call names a key and
// the state lives in the Store, so many Limiters (or processes, with a shared
// Redis) can enforce one limit together.
//
// A Limiter is safe for concurrent use. Create one with NewLimiter.
//
// A store with a method Bind(Limit) (func(ctx, key string, n int64)
// (Result, error), error) whose function is Take of the one op {Key: key,
// Limit: limit, Cost: n} (store/memory's) is bound to the limit once, by
// NewLimiter, and AllowN calls that function: it neither builds an Op nor
// has the store validate the limit on each call, and does not allocate.
// Else a store with a method TakeOne(ctx, Op) (Result, error) that is Take
// of that one op is called through it, also without allocating; any other
// store through Take.
type Limiter struct {
	store Store
	bound bound    // the store's Bind of limit, when it has Bind; else allowOp
	one   oneTaker // store, when it has TakeOne and no Bind; else nil
	limit Limit
	now   func() time.Time // for Wait's deadline arithmetic; tests replace it
	sleep func(ctx context.Context, d time.Duration) error
}

// NewLimiter returns a Limiter that applies limit in store.
func NewLimiter(store Store, limit Limit) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("sluice: NewLimiter: nil store")
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("sluice: NewLimiter: %w", err)
	}
	l := &Limiter{store: store, limit: limit, now: time.Now, sleep: sleepCtx}
	if b, ok := store.(binder); ok {
		f, err := b.Bind(limit)
		if err != nil {
			return nil, fmt.Errorf("sluice: NewLimiter: %w", err)
		}
		l.bound = f
	} else {
		l.one, _ = store.(oneTaker)
		l.bound = l.allowOp
	}
	return l, nil
}

// bound takes n units for key under the limit it was bound to.
type bound = func(ctx context.Context, key string, n int64) (Result, error)

// binder is a Store that binds a limit once (see Limiter).
type binder interface {
	Bind(limit Limit) (bound, error)
}

// oneTaker is a Store that takes one op by value: its op and result do not
// escape to the heap as Take's slices do.
type oneTaker interface {
	TakeOne(ctx context.Context, op Op) (Result, error)
}

// Limit returns the limit the Limiter applies.
func (l *Limiter) Limit() Limit { return l.limit }

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.bound(ctx, key, 1) // as AllowN does, inlined into the caller
}

// AllowN takes n units for key if they are available now and reports the
// Result. It does not wait. For a LeakyBucket limit, an allowed Result may
// carry a Delay the caller should wait before proceeding (WaitN does so).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	return l.bound(ctx, key, n) // inlined into Allow: the Result is copied once less
}

// allowOp is AllowN through the store's TakeOne or Take.
func (l *Limiter) allowOp(ctx context.Context, key string, n int64) (Result, error) {
	if l.one != nil {
		return l.one.TakeOne(ctx, Op{Key: key, Limit: l.limit, Cost: n})
	}
	ops := [1]Op{{Key: key, Limit: l.limit, Cost: n}}
	var res [1]Result
	if err := l.store.Take(ctx, ops[:], res[:]); err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n units for key are taken, or ctx is done. It returns
// ErrCostExceedsLimit at once if n can never be admitted, and
// ErrWouldExceedDeadline at once if the wait would outlast ctx's deadline. For
// a LeakyBucket limit it also waits out the admitted Delay.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	for {
		r, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		wait := r.Delay
		switch {
		case r.Reason == ReasonCostTooHigh:
			return fmt.Errorf("sluice: WaitN(%q, %d) with limit %v: %w", key, n, l.limit, ErrCostExceedsLimit)
		case !r.Allowed:
			wait = r.RetryAfter
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && l.now().Add(wait).After(dl) {
				return fmt.Errorf("sluice: WaitN(%q, %d): need %v: %w", key, n, wait, ErrWouldExceedDeadline)
			}
			if err := l.sleep(ctx, wait); err != nil {
				return err
			}
		}
		if r.Allowed {
			return nil
		}
	}
}

// Acquire takes one concurrency slot for key (the Limit must be Concurrency).
// When allowed, release must be called once the work is done; calling it more
// than once is harmless. When denied, release is nil.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(context.Context) error, r Result, err error) {
	if l.limit.Algorithm != Concurrency {
		return nil, Result{}, fmt.Errorf("sluice: Acquire needs a concurrency limit, have %v", l.limit.Algorithm)
	}
	r, err = l.AllowN(ctx, key, 1)
	if err != nil || !r.Allowed {
		return nil, r, err
	}
	lease := r.Lease
	release = func(ctx context.Context) error {
		ops := [1]Op{{Key: key, Limit: l.limit, Release: true, Lease: lease}}
		var res [1]Result
		return l.store.Take(ctx, ops[:], res[:])
	}
	return release, r, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
