/* SPDX-License-Identifier: MIT */
/* The global protocol of channels/ticket_lock.c: tickets, the seen hint,
 * trylock, timeouts that give the last ticket back or mark it abandoned in
 * the skip table, the settle step, releases (one FAA of serving), waiters
 * that pass an abandoned ticket found at the head of the queue, and the
 * reclaim of a node's abandoned ticket by its next lock attempt. Every
 * remote atomic (FAA, CAS, READ of one word at the host) is one atomic
 * step. The node-local layer (local queue and handovers) is not
 * modelled: it only ever lets one thread per node run this protocol, and
 * keeps the node's abandoned ticket (ab). The split acquire (ticket FAA
 * and a READ of serving in one batch) is the same steps: the READ is a
 * poll of the wait loop.
 *
 * NPROC nodes make NITER attempts each, every one a lock or a trylock; a
 * waiting lock may time out at any step, and may look for an abandoned
 * mark on the ticket being served at any step. SLOTS skip slots (default
 * NPROC). When every node is done, one more lock attempt that never times
 * out runs to the end.
 *
 * Checked (pan -DSAFETY):
 *   exclusion   at most one node in the section;
 *   release     a release, or a pass, finds serving equal to the ticket
 *               it moves serving past;
 *   bounded     at most NPROC + 1 tickets are outstanding (next -
 *               serving): one per node, and one being passed (its mark
 *               cleared, serving not yet moved) or the last attempt's;
 *               and with SLOTS >= NPROC a timed-out attempt always finds
 *               its ticket's skip slot free (a marked ticket NPROC ahead
 *               of one being passed finds that one's slot cleared):
 *               leaving never waits;
 *   no wedge    the last attempt gets the lock (else pan reports an
 *               invalid end state), after which serving == next and every
 *               skip slot is clear.
 *
 * Broken variants, each must fail:
 *   -DBROKEN_NO_PASS        waiters never pass an abandoned ticket: the
 *      lock stays at it for good;
 *   -DBROKEN_PASS_NO_CAS    a waiter that reads a mark passes the ticket
 *      without clearing the mark by CAS: two waiters both move serving;
 *   -DBROKEN_SETTLE_NO_CAS  a timed-out attempt that finds its ticket
 *      served holds the lock without taking its mark back by CAS: a
 *      waiter passes the same ticket;
 *   -DBROKEN_NO_RECLAIM     a lock attempt always takes a new ticket: a
 *      node piles up abandoned tickets and one finds its slot busy. */

#ifndef NPROC
#define NPROC 3
#endif
#ifndef NITER
#define NITER 2
#endif
#ifndef SLOTS
#define SLOTS NPROC
#endif

byte next = 0;
byte serving = 0;
byte mark[SLOTS];
byte in_cs = 0;
byte done = 0;

/* serve_next: one FAA of serving. */
inline release(r)
{
	atomic { assert(serving == r); serving++ };
	g = r + 1
}

/* pass_abandoned: serving was seen at s (below our ticket); READ s's
 * slot, and if it holds s's mark, clear it by CAS and FAA serving past s. */
inline pass()
{
	atomic { old = mark[s % SLOTS] };
	if
	:: old == s + 1 ->
#ifdef BROKEN_PASS_NO_CAS
		old = 1;
#else
		atomic {
			if
			:: mark[s % SLOTS] == s + 1 -> mark[s % SLOTS] = 0; old = 1
			:: else -> old = 0
			fi
		};
#endif
		if
		:: old == 1 -> atomic { assert(serving == s); serving++ }; g = s + 1
		:: else
		fi
	:: else
	fi
}

/* Wait for ticket t: poll serving; at any poll that finds another
 * ticket served, maybe look for its mark and pass it; time out at any
 * step. */
inline wait()
{
	do
	:: atomic { s = serving };
	   g = s;
	   assert(s <= t);
	   if
	   :: s == t -> got = 1; break
	   :: else
	   fi;
#ifndef BROKEN_NO_PASS
	   if
	   :: pass()
	   :: skip
	   fi
#endif
	:: break
	od
}

/* The last attempt's wait: it never times out, and blocks until it is
 * served or finds a mark to pass, so a lock nobody can move leaves it
 * blocked for good (an invalid end state). */
inline wait_final()
{
	do
	:: atomic { serving == t -> s = t }; g = s; got = 1; break
#ifndef BROKEN_NO_PASS
	:: atomic { serving < t && mark[serving % SLOTS] == serving + 1 ->
		    s = serving };
	   g = s;
	   pass()
#endif
	od
}

/* ticket_leave + mark_settle for ticket t (not served yet, as far as the
 * timed-out waiter knows); an abandoned ticket nobody passed yet is kept
 * in ab. */
inline leave()
{
	atomic {
		if
		:: next == t + 1 -> next = t; old = 1
		:: else -> old = 0
		fi
	};
	if
	:: old == 0 ->
		atomic {
			old = mark[t % SLOTS];
			if
			:: old == 0 -> mark[t % SLOTS] = t + 1
			:: else
			fi
		};
		/* the slot is free: at most NPROC tickets are outstanding */
		assert(old == 0);
		/* mark_settle: serving at t takes the mark back (unless a
		 * waiter passing t cleared it first); the ticket is kept only
		 * while serving is below it */
		atomic { s = serving };
		g = s;
		if
		:: s == t ->
#ifdef BROKEN_SETTLE_NO_CAS
			mark[t % SLOTS] = 0; got = 1
#else
			atomic {
				if
				:: mark[t % SLOTS] == t + 1 ->
					mark[t % SLOTS] = 0; got = 1
				:: else
				fi
			}
#endif
		:: s < t -> ab = t + 1
		:: else
		fi
	:: else
	fi
}

/* ticket_reclaim, else FAA next. */
inline take()
{
	old = 0;
#ifndef BROKEN_NO_RECLAIM
	if
	:: ab != 0 ->
		atomic {
			if
			:: mark[(ab - 1) % SLOTS] == ab ->
				mark[(ab - 1) % SLOTS] = 0; old = 1
			:: else
			fi
		};
		t = ab - 1
	:: else
	fi;
#endif
	ab = 0;
	if
	:: old == 0 ->
		atomic { t = next; next++; assert(next - serving <= NPROC + 1) }
	:: else
	fi
}

/* take, then wait (or time out and leave). */
inline lock()
{
	take();
	if
	:: g == t -> got = 1
	:: else ->
		wait();
		if
		:: !got -> leave()
		:: else
		fi
	fi
}

/* global_try: CAS next from the seen value; if stale, READ serving and
 * CAS once more. */
inline trylock()
{
	atomic {
		old = next;
		if
		:: next == g -> next = g + 1
		:: else
		fi
	};
	if
	:: old == g -> t = g; got = 1; ab = 0
	:: else ->
		atomic { s = serving };
		g = s;
		if
		:: s == old ->
			atomic {
				old = next;
				if
				:: next == s -> next = s + 1
				:: else
				fi
			};
			if
			:: old == s -> t = s; got = 1; ab = 0
			:: else
			fi
		:: else
		fi
	fi
}

/* The critical section and the release. */
inline section()
{
	in_cs++;
	assert(in_cs == 1);
	in_cs--;
	r = t;
	release(r)
}

proctype node()
{
	byte t, s, old, r, g = 0, k = 0, ab = 0;
	bit got;
	do
	:: k < NITER ->
		got = 0;
		if
		:: lock()
		:: trylock()
		fi;
		if
		:: got -> section()
		:: else
		fi;
		k++
	:: else -> break
	od;
	done++
}

init
{
	byte i, t, s, old, r, g = 0, ab = 0;
	bit got = 0;
	atomic {
		for (i : 1 .. NPROC) {
			run node()
		}
	};
	done == NPROC;
	/* a newcomer that never times out gets the lock */
	take();
	if
	:: g == t -> got = 1
	:: else -> wait_final()
	fi;
	section();
	assert(serving == next);
	for (i : 0 .. SLOTS - 1) {
		assert(mark[i] == 0)
	}
}
