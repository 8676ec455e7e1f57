/* SPDX-License-Identifier: MIT */
/* loco-netdelay: a user-space packet delay line between TUN devices, for
 * kernels without the netem qdisc. It creates one TUN device (IFF_TUN,
 * IFF_NO_PI) per node, each known by its node's IPv4 address; whoever
 * started it (tools/loco-run --netns) moves each device into its node's
 * network namespace and gives it that address. Every IPv4 packet a node
 * sends out of its device is read here, held for the delay and written to
 * the device whose address is the packet's destination. The delay is the
 * same for every packet, so one FIFO is in deadline order. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#define ND_MAX_DEVS	64	/* LOCO_MAX_NODES */
#define ND_MAX_DELAY_MS	10000.0
#define ND_MIN_MTU	576
#define ND_MAX_MTU	65535
#define ND_MAX_QUEUE_BYTES (1ull << 30)
#define ND_MAX_SPIN_US	100
#define ND_READ_BATCH	64	/* packets read from one device per wake-up */
#define ND_SIGNAL_TAG	UINT32_MAX
#define ND_IPV4_HDR	20

struct nd_dev {
	char name[IFNAMSIZ];
	uint32_t addr;		/* network byte order */
	int fd;			/* -1 once it failed */
};

struct nd_pkt {
	uint64_t due_ns;	/* CLOCK_MONOTONIC */
	uint32_t len;
	uint32_t dst;		/* index into devs */
};

/* The delay line: a ring of CAP packet slots of MTU bytes each. */
struct nd_fifo {
	struct nd_pkt *pkt;
	unsigned char *buf;
	uint32_t cap;
	uint32_t head;
	uint32_t count;
};

struct nd_counters {
	uint64_t forwarded;
	uint64_t bytes;
	uint64_t not_ipv4;
	uint64_t malformed;	/* short, bad header length, total length */
	uint64_t no_dest;	/* no device has the destination address */
	uint64_t queue_full;
	uint64_t write_failed;
	uint64_t read_failed;	/* devices no longer read */
	uint32_t max_queued;
	uint64_t late_sum_ns;	/* release time past the deadline */
	uint64_t late_max_ns;
};

struct netdelay {
	struct nd_dev dev[ND_MAX_DEVS];
	unsigned int ndev;
	uint64_t delay_ns;
	uint64_t spin_ns;	/* woken this early, then spins to the deadline */
	unsigned int mtu;
	unsigned int fifo_prio;	/* SCHED_FIFO priority, 0: not */
	struct nd_fifo q;
	struct nd_counters c;
	unsigned char *scratch;	/* reads while the queue is full */
	int ep;
	int sig;
	int write_errno;	/* the first write failure, reported once */
};

static void nd_usage(FILE *f)
{
	fputs("usage: loco-netdelay [--delay-ms MS] [--mtu N] [--queue-max N]\n"
	      "                     [--spin-us US] [--fifo-priority P] DEV=ADDR...\n"
	      "Creates a TUN device DEV (IFF_TUN, IFF_NO_PI) per node with IPv4\n"
	      "address ADDR, prints 'ready' on stdout, then forwards every IPv4\n"
	      "packet read from a device to the device whose ADDR is its\n"
	      "destination, MS milliseconds after it was read. Packets of\n"
	      "another protocol or to another address are dropped and counted.\n"
	      "The caller moves each device into its node's network namespace\n"
	      "and configures it (tools/loco-run --netns does); the devices\n"
	      "vanish when this program exits. Stops on SIGTERM, SIGINT or\n"
	      "SIGHUP and prints its counters on stderr. Needs CAP_NET_ADMIN.\n"
	      "  --delay-ms MS       0..10000, may be fractional (default 0)\n"
	      "  --mtu N             the devices' MTU, 576..65535 (default 1500)\n"
	      "  --queue-max N       packets waiting at once (default 4096); more\n"
	      "                      are dropped and counted\n"
	      "  --spin-us US        0..100 (default 0): wake up US microseconds\n"
	      "                      before a deadline and spin to it, so that a\n"
	      "                      timer's wake-up latency is not added\n"
	      "  --fifo-priority P   1..99: run at SCHED_FIFO priority P, so that\n"
	      "                      a busy CPU does not make a deadline late (a\n"
	      "                      warning if not allowed)\n"
	      "Exit: 0 after a signal, 1 on a failure (named on stderr), 2 on\n"
	      "usage errors.\n", f);
}

static uint64_t nd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- command line ---- */

static int nd_parse_uint(const char *opt, const char *s, unsigned long lo,
			 unsigned long hi, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "loco-netdelay: %s: expected %lu..%lu, got '%s'\n",
			opt, lo, hi, s);
		return -EINVAL;
	}
	*out = (unsigned int)v;
	return 0;
}

static int nd_parse_delay(const char *s, uint64_t *out)
{
	char *end;
	double ms;

	errno = 0;
	ms = strtod(s, &end);
	if (errno || end == s || *end || !(ms >= 0 && ms <= ND_MAX_DELAY_MS)) {
		fprintf(stderr, "loco-netdelay: --delay-ms: expected 0..%g "
			"milliseconds, got '%s'\n", ND_MAX_DELAY_MS, s);
		return -EINVAL;
	}
	*out = (uint64_t)llround(ms * 1e6);
	return 0;
}

static int nd_parse_dev(struct netdelay *nd, const char *spec)
{
	const char *eq = strchr(spec, '=');
	size_t len = eq ? (size_t)(eq - spec) : 0;
	struct nd_dev *d;
	struct in_addr a;

	if (nd->ndev == ND_MAX_DEVS) {
		fprintf(stderr, "loco-netdelay: at most %d devices\n", ND_MAX_DEVS);
		return -E2BIG;
	}
	if (!eq || !len || len >= IFNAMSIZ || memchr(spec, '/', len) ||
	    inet_pton(AF_INET, eq + 1, &a) != 1) {
		fprintf(stderr, "loco-netdelay: expected DEV=ADDR (a device name "
			"of 1..%d characters, an IPv4 address), got '%s'\n",
			IFNAMSIZ - 1, spec);
		return -EINVAL;
	}
	d = &nd->dev[nd->ndev];
	memcpy(d->name, spec, len);
	d->name[len] = '\0';
	d->addr = a.s_addr;
	d->fd = -1;
	for (unsigned int i = 0; i < nd->ndev; i++) {
		if (!strcmp(nd->dev[i].name, d->name) || nd->dev[i].addr == d->addr) {
			fprintf(stderr, "loco-netdelay: '%s': device name or address "
				"given twice\n", spec);
			return -EINVAL;
		}
	}
	nd->ndev++;
	return 0;
}

static int nd_parse(struct netdelay *nd, unsigned int *queue_max, int argc,
		    char **argv)
{
	static const struct option longopts[] = {
		{ "delay-ms", required_argument, NULL, 'd' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "queue-max", required_argument, NULL, 'q' },
		{ "spin-us", required_argument, NULL, 's' },
		{ "fifo-priority", required_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned int spin_us = 0;
	int o, rc = 0;

	while ((o = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (o) {
		case 'd':
			rc = nd_parse_delay(optarg, &nd->delay_ns);
			break;
		case 'm':
			rc = nd_parse_uint("--mtu", optarg, ND_MIN_MTU, ND_MAX_MTU,
					   &nd->mtu);
			break;
		case 'q':
			rc = nd_parse_uint("--queue-max", optarg, 1, 1u << 20,
					   queue_max);
			break;
		case 's':
			rc = nd_parse_uint("--spin-us", optarg, 0, ND_MAX_SPIN_US,
					   &spin_us);
			nd->spin_ns = (uint64_t)spin_us * 1000u;
			break;
		case 'f':
			rc = nd_parse_uint("--fifo-priority", optarg, 1, 99,
					   &nd->fifo_prio);
			break;
		case 'h':
			nd_usage(stdout);
			exit(0);
		default:
			rc = -EINVAL;
		}
		if (rc)
			return rc;
	}
	if (optind == argc) {
		fprintf(stderr, "loco-netdelay: no DEV=ADDR given\n");
		return -EINVAL;
	}
	for (; optind < argc; optind++) {
		rc = nd_parse_dev(nd, argv[optind]);
		if (rc)
			return rc;
	}
	if ((unsigned long long)*queue_max * nd->mtu > ND_MAX_QUEUE_BYTES) {
		fprintf(stderr, "loco-netdelay: --queue-max %u x --mtu %u is more "
			"than %llu MiB of queue\n", *queue_max, nd->mtu,
			ND_MAX_QUEUE_BYTES >> 20);
		return -EINVAL;
	}
	return 0;
}

/* ---- set-up ---- */

static int nd_fifo_init(struct nd_fifo *q, uint32_t cap, unsigned int mtu)
{
	q->pkt = calloc(cap, sizeof(*q->pkt));
	q->buf = malloc((size_t)cap * mtu);
	q->cap = cap;
	q->head = q->count = 0;
	if (!q->pkt || !q->buf) {
		free(q->pkt);
		free(q->buf);
		fprintf(stderr, "loco-netdelay: no memory for a queue of %u "
			"packets of %u bytes\n", cap, mtu);
		return -ENOMEM;
	}
	return 0;
}

static void nd_fifo_fini(struct nd_fifo *q)
{
	free(q->pkt);
	free(q->buf);
}

/* Creates device D (exclusively: an existing device of that name is an
 * error, never taken over) with MTU bytes. */
static int nd_tun_open(struct nd_dev *d, unsigned int mtu, int ctl)
{
	struct ifreq ifr;
	int fd, err;

	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		fprintf(stderr, "loco-netdelay: open /dev/net/tun: %s%s\n",
			strerror(err), err == EACCES || err == EPERM ?
			" (needs CAP_NET_ADMIN: run as root)" : "");
		return -err;
	}
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_TUN_EXCL;
	memcpy(ifr.ifr_name, d->name, sizeof(d->name));
	if (ioctl(fd, TUNSETIFF, &ifr)) {
		err = errno;
		fprintf(stderr, "loco-netdelay: TUNSETIFF %s: %s%s\n", d->name,
			strerror(err), err == EBUSY || err == EEXIST ?
			" (a device of that name exists)" : "");
		close(fd);
		return -err;
	}
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, d->name, sizeof(d->name));
	ifr.ifr_mtu = (int)mtu;
	if (ioctl(ctl, SIOCSIFMTU, &ifr)) {
		err = errno;
		fprintf(stderr, "loco-netdelay: SIOCSIFMTU %s %u: %s\n", d->name,
			mtu, strerror(err));
		close(fd);
		return -err;
	}
	d->fd = fd;
	return 0;
}

static int nd_epoll_add(int ep, int fd, uint32_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };

	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
		fprintf(stderr, "loco-netdelay: epoll_ctl: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

/* SIGTERM, SIGINT and SIGHUP arrive through a signalfd in the loop. */
static int nd_signals(struct netdelay *nd)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL)) {
		fprintf(stderr, "loco-netdelay: sigprocmask: %s\n", strerror(errno));
		return -errno;
	}
	nd->sig = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (nd->sig < 0) {
		fprintf(stderr, "loco-netdelay: signalfd: %s\n", strerror(errno));
		return -errno;
	}
	return nd_epoll_add(nd->ep, nd->sig, ND_SIGNAL_TAG);
}

static int nd_setup(struct netdelay *nd)
{
	int ctl, rc = 0;

	/* Deadlines are microseconds apart: no default 50 us of slack on
	 * the loop's timeouts. */
	if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0))
		fprintf(stderr, "loco-netdelay: warning: PR_SET_TIMERSLACK: %s\n",
			strerror(errno));
	if (nd->fifo_prio) {
		struct sched_param sp = { .sched_priority = (int)nd->fifo_prio };

		if (sched_setscheduler(0, SCHED_FIFO, &sp))
			fprintf(stderr, "loco-netdelay: warning: SCHED_FIFO priority "
				"%u: %s; the delay may grow on a busy host\n",
				nd->fifo_prio, strerror(errno));
	}
	nd->ep = epoll_create1(EPOLL_CLOEXEC);
	if (nd->ep < 0) {
		fprintf(stderr, "loco-netdelay: epoll_create1: %s\n", strerror(errno));
		return -errno;
	}
	rc = nd_signals(nd);
	if (rc)
		return rc;
	ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (ctl < 0) {
		fprintf(stderr, "loco-netdelay: socket: %s\n", strerror(errno));
		return -errno;
	}
	for (unsigned int i = 0; i < nd->ndev && !rc; i++) {
		rc = nd_tun_open(&nd->dev[i], nd->mtu, ctl);
		if (!rc)
			rc = nd_epoll_add(nd->ep, nd->dev[i].fd, i);
	}
	close(ctl);
	return rc;
}

static void nd_teardown(struct netdelay *nd)
{
	for (unsigned int i = 0; i < nd->ndev; i++) {
		if (nd->dev[i].fd >= 0)
			close(nd->dev[i].fd);
	}
	if (nd->sig >= 0)
		close(nd->sig);
	if (nd->ep >= 0)
		close(nd->ep);
	nd_fifo_fini(&nd->q);
	free(nd->scratch);
}

/* ---- forwarding ---- */

/* The device whose address is the destination of IPv4 packet P of LEN
 * bytes, or -1 (counted). */
static int nd_route(struct netdelay *nd, const unsigned char *p, size_t len)
{
	uint32_t dst;

	if (len < 1 || p[0] >> 4 != 4) {
		nd->c.not_ipv4++;
		return -1;
	}
	if (len < ND_IPV4_HDR || (p[0] & 0xf) * 4u < ND_IPV4_HDR ||
	    ((size_t)p[2] << 8 | p[3]) != len) {
		nd->c.malformed++;	/* also a read the MTU truncated */
		return -1;
	}
	memcpy(&dst, p + 16, sizeof(dst));
	for (unsigned int i = 0; i < nd->ndev; i++) {
		if (nd->dev[i].addr == dst)
			return (int)i;
	}
	nd->c.no_dest++;
	return -1;
}

static void nd_dev_failed(struct netdelay *nd, struct nd_dev *d, int err)
{
	fprintf(stderr, "loco-netdelay: read %s: %s; no longer read\n", d->name,
		strerror(err));
	nd->c.read_failed++;
	epoll_ctl(nd->ep, EPOLL_CTL_DEL, d->fd, NULL);
}

/* Reads up to ND_READ_BATCH packets from device I into the queue. */
static void nd_drain(struct netdelay *nd, unsigned int i)
{
	struct nd_fifo *q = &nd->q;
	struct nd_dev *d = &nd->dev[i];

	for (int n = 0; n < ND_READ_BATCH; n++) {
		uint32_t tail = (q->head + q->count) % q->cap;
		bool full = q->count == q->cap;
		unsigned char *buf = full ? nd->scratch :
			q->buf + (size_t)tail * nd->mtu;
		ssize_t len = read(d->fd, buf, nd->mtu);
		int dst;

		if (len < 0) {
			if (errno != EAGAIN && errno != EINTR)
				nd_dev_failed(nd, d, errno);
			return;
		}
		dst = nd_route(nd, buf, (size_t)len);
		if (dst < 0)
			continue;
		if (full) {
			nd->c.queue_full++;
			continue;
		}
		q->pkt[tail] = (struct nd_pkt){
			.due_ns = nd_now_ns() + nd->delay_ns,
			.len = (uint32_t)len,
			.dst = (uint32_t)dst,
		};
		q->count++;
		if (q->count > nd->c.max_queued)
			nd->c.max_queued = q->count;
	}
}

/* Writes every packet whose deadline is NOW or earlier. */
static void nd_release(struct netdelay *nd, uint64_t now)
{
	struct nd_fifo *q = &nd->q;

	while (q->count && q->pkt[q->head].due_ns <= now) {
		const struct nd_pkt *p = &q->pkt[q->head];
		const unsigned char *buf = q->buf + (size_t)q->head * nd->mtu;
		int fd = nd->dev[p->dst].fd;
		ssize_t n = fd < 0 ? -1 : write(fd, buf, p->len);

		if (n == (ssize_t)p->len) {
			nd->c.forwarded++;
			nd->c.bytes += p->len;
			nd->c.late_sum_ns += now - p->due_ns;
			if (now - p->due_ns > nd->c.late_max_ns)
				nd->c.late_max_ns = now - p->due_ns;
		} else {
			if (!nd->c.write_failed++)
				nd->write_errno = n < 0 ? errno : EIO;
		}
		q->head = (q->head + 1) % q->cap;
		q->count--;
		now = nd_now_ns();
	}
}

/* True once a stop signal came. */
static bool nd_stop_signal(struct netdelay *nd)
{
	struct signalfd_siginfo si;

	return read(nd->sig, &si, sizeof(si)) == (ssize_t)sizeof(si);
}

/* After a timeout that came up to spin_ns early: on to the deadline
 * (packets arriving meanwhile are stamped later, never delayed less). */
static void nd_spin(const struct netdelay *nd)
{
	uint64_t due = nd->q.pkt[nd->q.head].due_ns;

	while (nd_now_ns() < due)
		;
}

static int nd_run(struct netdelay *nd)
{
	struct epoll_event ev[ND_MAX_DEVS + 1];

	for (;;) {
		uint64_t now = nd_now_ns();
		struct timespec ts, *tp = NULL;
		int n;

		nd_release(nd, now);
		if (nd->q.count) {
			uint64_t due = nd->q.pkt[nd->q.head].due_ns;
			uint64_t wait = 0;

			now = nd_now_ns();
			if (due > now + nd->spin_ns)
				wait = due - now - nd->spin_ns;
			ts.tv_sec = (time_t)(wait / 1000000000u);
			ts.tv_nsec = (long)(wait % 1000000000u);
			tp = &ts;
		}
		n = epoll_pwait2(nd->ep, ev, (int)nd->ndev + 1, tp, NULL);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "loco-netdelay: epoll_pwait2: %s\n",
				strerror(errno));
			return -errno;
		}
		if (n == 0 && nd->spin_ns)
			nd_spin(nd);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u32 == ND_SIGNAL_TAG) {
				if (nd_stop_signal(nd))
					return 0;
				continue;
			}
			nd_drain(nd, ev[i].data.u32);
		}
	}
}

static void nd_report(const struct netdelay *nd, double secs)
{
	const struct nd_counters *c = &nd->c;
	uint64_t dropped = c->not_ipv4 + c->malformed + c->no_dest +
			   c->queue_full + c->write_failed;
	struct rusage ru;
	double cpu = 0;

	if (!getrusage(RUSAGE_SELF, &ru))
		cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	fprintf(stderr, "loco-netdelay: delay %g ms, %.1f s (%.2f s of CPU): "
		"forwarded %" PRIu64
		" packets (%" PRIu64 " bytes), late by %.1f us on average, %.1f "
		"us at most; max queue %u packets; dropped %" PRIu64 " (not IPv4 %"
		PRIu64 ", malformed %" PRIu64 ", no such node %" PRIu64
		", queue full %" PRIu64 ", write failed %" PRIu64 "%s%s); left "
		"queued %u; devices lost %" PRIu64 "\n",
		(double)nd->delay_ns / 1e6, secs, cpu, c->forwarded, c->bytes,
		c->forwarded ? (double)c->late_sum_ns / (double)c->forwarded / 1e3 : 0.0,
		(double)c->late_max_ns / 1e3, c->max_queued, dropped, c->not_ipv4,
		c->malformed, c->no_dest, c->queue_full, c->write_failed,
		c->write_failed ? ": first " : "",
		c->write_failed ? strerror(nd->write_errno) : "", nd->q.count,
		c->read_failed);
}

int main(int argc, char **argv)
{
	struct netdelay nd = { .mtu = 1500, .ep = -1, .sig = -1 };
	unsigned int queue_max = 4096;
	uint64_t t0;
	int rc;

	if (nd_parse(&nd, &queue_max, argc, argv)) {
		fputs("(see loco-netdelay --help)\n", stderr);
		return 2;
	}
	rc = nd_fifo_init(&nd.q, queue_max, nd.mtu);
	if (rc)
		return 1;
	nd.scratch = malloc(nd.mtu);
	if (!nd.scratch)
		fprintf(stderr, "loco-netdelay: no memory for a %u-byte buffer\n",
			nd.mtu);
	rc = nd.scratch ? nd_setup(&nd) : -ENOMEM;
	if (!rc && (printf("ready\n") < 0 || fflush(stdout))) {
		fprintf(stderr, "loco-netdelay: writing 'ready': %s\n",
			strerror(errno));
		rc = -EIO;
	}
	t0 = nd_now_ns();
	if (!rc)
		rc = nd_run(&nd);
	if (!rc)
		nd_report(&nd, (double)(nd_now_ns() - t0) / 1e9);
	nd_teardown(&nd);
	return rc ? 1 : 0;
}
