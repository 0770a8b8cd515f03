/*
 * A model of Sluice's allotment protocol, for Spin.
 *
 * One fixed_window key of quota Q, windows of W ticks, TMAX ticks in all,
 * in the global store (store/memory's allotWindow and Take, which are
 * scripts/allot.lua's arithmetic), leased by two hybrid instances
 * (store/hybrid: allot, tryLocal, Sweep, voidReset, heardResets) and one
 * RLQS client (server/rlqs: a token-bucket assignment of exactly the
 * units granted, replaced by the next, void at its TTL, never revoked by
 * a reset, given back by park.go when its stream is gone).
 *
 * Every step is atomic and may happen at any point, in any order the
 * guards allow: a lease is sent, processed by the store (at the store's
 * clock, later than sent), and its reply applied (later still: a late
 * reply), or lost (an Allot error after the store counted it); a hit is
 * spent from the allotment or decided by the store's Take; units are
 * given back (an idle key's Sweep, Close, RLQS's park) and the give-back
 * lands later; an instance dies with what it holds; the key is reset
 * (POST /admin/v1/reset through any instance), and each hybrid instance
 * hears the announcement later, or never (lost, silently), or is told
 * announcements may have been missed (Redis's resubscribe: void all);
 * the clock ticks, and at a window's edge the counter starts afresh.
 *
 * Ghost state follows every unit by the incarnation of the counter it
 * was taken from (a new one at each window and each reset), and checks:
 *
 *   BOUND  (admitted ≤ quota + units outstanding) from a window's start,
 *          or from a reset, to the next of either, the admissions are at
 *          most Q, plus (from a reset) the units outstanding at the reset
 *          (held before their deadline, granted and on their way back,
 *          or given back and on their way to the store); and each counter
 *          incarnation is charged (Takes it admitted plus its units
 *          spent) at most Q plus the units given back to it from an
 *          earlier incarnation (the documented late give-back).
 *   TTL    (a reset is honoured within one lease TTL) a unit taken from
 *          a counter that a reset ended is never spent a TTL (W, the
 *          longest a fixed_window allotment lives) or more after the
 *          reset; a unit of a window that ended is never spent after it.
 *
 * Spent units are taken oldest incarnation first (FIFO), the order that
 * keeps a reset's units longest.
 *
 * MUTANT_ARRIVAL (a deadline measured from the reply's arrival, not from
 * when the lease was sent) and MUTANT_ANYEPOCH (a give-back applied
 * whatever its epoch) are the code with one safeguard removed: the checks
 * must fail on each (the Go test asserts they do). MUTANT_NOVOID (a grant
 * whose key was reset on its way is applied, not voided) passes: the
 * bounds hold without that safeguard, which only admits less.
 *
 * SCRIPT: with -DSCRIPT, init runs the steps of script.pml (written by
 * the Go test from its step table) in order and prints what each did, so
 * the same table can be driven through store/hybrid and store/memory.
 */

#ifndef Q
#define Q 4
#endif
#ifndef W
#define W 2
#endif
#ifndef TMAX
#define TMAX 4
#endif
#ifndef KEEP
#define KEEP 1      /* hybrid's reserve (Keep) */
#endif
#ifndef SPLIT
#define SPLIT 2
#endif
/* SPLIT: one grant ≤ 1/SPLIT of what stands above the reserve */
#ifndef NH
#define NH 2        /* hybrid instances: 0 .. NH-1 */
#endif
#ifndef N
#define N NH        /* and, when N is NH+1, the RLQS client: NH */
#endif
#define ENVOY NH
#ifndef WANT
#define WANT 2      /* units a lease asks for */
#endif
#ifndef MAXDEATHS
#define MAXDEATHS 1 /* instances that die */
#endif
#ifndef MAXLOST
#define MAXLOST 1   /* lease replies lost (an Allot error after the store counted it) */
#endif
#define NINC 4      /* incarnations: ≤ TMAX/W windows + MAXRESETS resets */
#ifndef MAXRESETS
#define MAXRESETS 1
#endif
#define NONE 255

/* the store */
byte now, cur, wid, inc, resets;
byte deaths, lost;      /* faults so far */

/* instances */
bool alive[N];
byte held[N], deadline[N], ep[N];
byte heldBy[N * NINC];                 /* ghost: held by incarnation */
byte rgen[N], voidGen[N], allGen[N];    /* resetGen, e.voidGen, allGen */
byte pend[N];                           /* announcement on its way: 0 none, 1 key, 2 all */

/* a lease: 0 none, 1 sent, 2 processed (reply on its way) */
byte lst[N], lwant[N], lgen[N], lsent[N], ln[N], lep[N], lttl[N], linc[N];
/* a give-back on its way */
bool gst[N];
byte gep[N], gn[N];
byte gBy[N * NINC];

/* ghost: the bounds */
byte admWin;            /* admissions since the window began or the key was reset */
byte outRes;            /* units outstanding at that reset (0 at a window's start) */
byte charged[NINC];     /* Takes admitted plus units spent, by incarnation */
byte lateGive[NINC];    /* units of older incarnations given back to it */
byte endT[NINC];        /* when the incarnation ended (NONE: current) */
bool endByReset[NINC];
byte incWin[NINC];      /* the window of each incarnation */
byte lastAdmit;         /* SCRIPT: 1 when the last hit was admitted */

byte i, j, k, n;        /* scratch, zeroed after each step */

#define MIN(a, b) ((a) < (b) -> (a) : (b))

inline admit(k) {
	admWin++;
	charged[k]++;
	assert(admWin <= Q + outRes);             /* BOUND, per window */
	assert(charged[k] <= Q + lateGive[k]);    /* BOUND, per counter */
	if
	:: endT[k] != NONE && endByReset[k] -> assert(now < endT[k] + W)   /* TTL */
	:: endT[k] != NONE && !endByReset[k] -> assert(now < endT[k])      /* window */
	:: else -> skip
	fi;
	assert(now < (incWin[k] + 1) * W);          /* never past its window */
#ifdef SCRIPT
	lastAdmit = 1
#endif
}

/* store: a new incarnation of the counter (a window's edge or a reset) */
inline newInc(byReset) {
	endT[inc] = now;
	endByReset[inc] = byReset;
	inc++;
	endT[inc] = NONE;
	incWin[inc] = now / W;
	cur = 0
}

/* outstanding units, counted at a reset (the reset's own slack) */
inline countOutstanding() {
	j = 0;
	do
	:: j < N ->
		if
		:: alive[j] && now < deadline[j] -> outRes = outRes + held[j]
		:: else -> skip
		fi;
		if
		:: lst[j] == 2 -> outRes = outRes + ln[j]
		:: else -> skip
		fi;
		if
		:: gst[j] -> outRes = outRes + gn[j]
		:: else -> skip
		fi;
		j++
	:: else -> break
	od
}

/* spend one held unit, oldest incarnation first */
inline spendOne(i) {
	k = 0;
	do
	:: heldBy[i * NINC + k] > 0 -> break
	:: else -> k++
	od;
	heldBy[i * NINC + k]--;
	held[i]--;
	admit(k)
}

inline dropHeld(i) {
	held[i] = 0;
	k = 0;
	do
	:: k < NINC -> heldBy[i * NINC + k] = 0; k++
	:: else -> break
	od
}

/* a hit at instance i: tryLocal, else the store's Take (cost 1) */
inline hit(i) {
#ifdef SCRIPT
	lastAdmit = 0;
#endif
	if
	:: held[i] > 0 && now >= deadline[i] -> dropHeld(i)   /* void at its deadline */
	:: else -> skip
	fi;
	if
	:: held[i] > 0 -> spendOne(i)
	:: else ->
		if
		:: cur < Q -> cur++; admit(inc)
		:: else -> skip   /* denied */
		fi
	fi
}

/* send a lease (allot: gen read before the request leaves) */
inline sendLease(i, w) {
	lst[i] = 1; lwant[i] = w; lgen[i] = rgen[i]; lsent[i] = now
}

/* the store processes i's lease: allotWindow (the window's counter is
 * already current: newInc at each edge), or RLQS's leaseAll (Keep 0, and
 * the last units fewer than SPLIT one at a time) */
inline processLease(i) {
	if
	:: i == ENVOY ->
		n = MIN(lwant[i], (Q - cur) / SPLIT);
		if
		:: n == 0 && cur < Q -> n = 1
		:: else -> skip
		fi
	:: else ->
		if
		:: Q > cur + KEEP -> n = MIN(lwant[i], (Q - cur - KEEP) / SPLIT)
		:: else -> n = 0
		fi
	fi;
	cur = cur + n;
	ln[i] = n; lep[i] = wid; lttl[i] = (wid + 1) * W - now; linc[i] = inc;
	lst[i] = 2
}

/* the reply reaches i: store/hybrid's allot, or RLQS's granted */
inline clearLease(i) {
	lst[i] = 0; lwant[i] = 0; lgen[i] = 0; lsent[i] = 0; ln[i] = 0; lep[i] = 0; lttl[i] = 0; linc[i] = 0
}

/* canonical: forget what can no longer matter, so that states differing
 * only there are one (the checked behaviour is unchanged) */
inline scrub() {
	j = 0;
	do
	:: j < N ->
		if
		:: held[j] == 0 -> deadline[j] = 0; ep[j] = 0   /* (read only when units are held) */
		:: else -> skip
		fi;
		if
		:: lst[j] == 0 -> rgen[j] = 0; voidGen[j] = 0; allGen[j] = 0   /* (compared only with a lease's gen) */
		:: else -> skip
		fi;
		j++
	:: else -> break
	od;
	k = 0;
	do
	:: k < inc ->
		/* an ended incarnation no unit is left of: its ghost is done */
		n = 0; j = 0;
		do
		:: j < N ->
			n = n + heldBy[j * NINC + k] + gBy[j * NINC + k];
			if
			:: lst[j] == 2 && linc[j] == k -> n = n + ln[j]
			:: else -> skip
			fi;
			j++
		:: else -> break
		od;
		if
		:: n == 0 -> charged[k] = 0; lateGive[k] = 0; endT[k] = 0; endByReset[k] = 0; incWin[k] = 0
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
	i = 0; j = 0; k = 0; n = 0
}

inline applyReply(i) {
	if
	:: !alive[i] -> skip   /* nobody to spend it: counted, never admitted */
	:: i == ENVOY ->
		/* a new assignment replaces the old one; void at its TTL */
		dropHeld(i);
		held[i] = ln[i]; heldBy[i * NINC + linc[i]] = ln[i];
		deadline[i] = lsent[i] + lttl[i]; ep[i] = lep[i]
#ifndef MUTANT_NOVOID
	:: i != ENVOY && (voidGen[i] > lgen[i] || allGen[i] > lgen[i]) ->
		skip   /* reset while on its way: voided on arrival */
#endif
	:: else ->
		if
		:: lep[i] != ep[i] || lsent[i] >= deadline[i] -> dropHeld(i); ep[i] = lep[i]
		:: else -> skip
		fi;
		held[i] = held[i] + ln[i];
		heldBy[i * NINC + linc[i]] = heldBy[i * NINC + linc[i]] + ln[i];
#ifndef MUTANT_ARRIVAL
		deadline[i] = lsent[i] + lttl[i]
#else
		deadline[i] = now + lttl[i]   /* measured from the reply's arrival */
#endif
	fi;
	clearLease(i)
}

/* i gives back what it holds (Sweep, Close; RLQS's park): the entry is
 * forgotten, the units travel with their epoch */
inline sendGive(i) {
	gst[i] = 1; gn[i] = held[i]; gep[i] = ep[i];
	k = 0;
	do
	:: k < NINC -> gBy[i * NINC + k] = heldBy[i * NINC + k]; k++
	:: else -> break
	od;
	dropHeld(i)
}

/* the store applies i's give-back: only in its own epoch (window) */
inline processGive(i) {
	gst[i] = 0;
	if
#ifndef MUTANT_ANYEPOCH
	:: gep[i] == wid ->
#else
	:: true ->   /* a give-back lands in whatever window is current */
#endif
		k = 0;
		do
		:: k < NINC ->
			if
			:: k != inc -> lateGive[inc] = lateGive[inc] + gBy[i * NINC + k]
			:: else -> skip
			fi;
			gBy[i * NINC + k] = 0;
			k++
		:: else -> break
		od;
		if
		:: cur > gn[i] -> cur = cur - gn[i]
		:: else -> cur = 0
		fi
	:: else -> skip
	fi;
	k = 0;
	do
	:: k < NINC -> gBy[i * NINC + k] = 0; k++
	:: else -> break
	od;
	gn[i] = 0; gep[i] = 0
}

/* the key is reset in the store; the announcement leaves for the hybrid
 * instances, the one it went through voids at once (settle's dropReset,
 * before and after the call) */
inline reset(via) {
	admWin = 0; outRes = 0;   /* a reset starts a fresh quota */
	countOutstanding();
	newInc(1);
	resets++;
	j = 0;
	do
	:: j < NH ->
		if
		:: j == via -> rgen[j]++; voidGen[j] = rgen[j]; dropHeld(j)
		:: else -> pend[j] = 1
		fi;
		j++
	:: else -> break
	od
}

/* i hears an announcement: of the key (voidReset) or "all" */
inline hear(i) {
	rgen[i]++;
	if
	:: pend[i] == 2 -> allGen[i] = rgen[i]
	:: else -> voidGen[i] = rgen[i]
	fi;
	dropHeld(i);
	pend[i] = 0
}

inline tick() {
	now++;
	if
	:: now % W == 0 -> newInc(0); wid = now / W; admWin = 0; outRes = 0
	:: else -> skip
	fi
}

inline initState() {
	endT[0] = NONE;
	j = 0;
	do
	:: j < N -> alive[j] = 1; j++
	:: else -> break
	od
}

#ifndef SCRIPT

/* One process takes every step, an instance chosen for each: the order of
 * steps is all that matters, and scratch variables are zeroed after each
 * (no state differs by a leftover). */
active proctype world() {
	atomic { initState() };
end:
	do
	:: atomic { now < TMAX -> tick(); scrub() }
	:: atomic { now < TMAX && resets < MAXRESETS -> select(i : 0 .. NH - 1); reset(i); scrub() }
	:: atomic { now < TMAX -> select(i : 0 .. N - 1);
		if
		:: alive[i] -> hit(i)
		:: else -> skip
		fi; scrub() }
	:: atomic { now < TMAX -> select(i : 0 .. N - 1);
		if
		:: alive[i] && lst[i] == 0 && !gst[i] -> sendLease(i, WANT)
		:: lst[i] == 1 -> processLease(i)
		:: lst[i] == 2 -> applyReply(i)
		:: lst[i] == 2 && lost < MAXLOST -> clearLease(i); lost++   /* the reply is lost: an Allot error */
		:: else -> skip
		fi; scrub() }
	:: atomic { now < TMAX -> select(i : 0 .. N - 1);
		if
		:: alive[i] && lst[i] == 0 && !gst[i] && held[i] > 0 && now < deadline[i] -> sendGive(i)
		:: gst[i] -> processGive(i)
		:: else -> skip
		fi; scrub() }
	:: atomic { now < TMAX -> select(i : 0 .. N - 1);
		if
		:: alive[i] && deaths < MAXDEATHS -> alive[i] = 0; dropHeld(i); deadline[i] = 0; ep[i] = 0; deaths++   /* dies */
		:: else -> skip
		fi; scrub() }
	:: atomic { now < TMAX -> select(i : 0 .. NH - 1);
		if
		:: pend[i] != 0 -> hear(i)
		:: pend[i] != 0 -> pend[i] = 0   /* lost, silently */
		:: pend[i] == 1 -> pend[i] = 2   /* missed: Resets says all */
		:: else -> skip
		fi; scrub() }
	od
}

#else

init {
	atomic { initState() };
#include "script.pml"
}

#endif
