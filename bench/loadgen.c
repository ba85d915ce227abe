/*
 * loadgen.c -- a small, cheap, single-threaded RESP load generator for
 * benchmarking disquepy against Redis.
 *
 * Build:  gcc -O2 -Wall -o bench/loadgen bench/loadgen.c
 *
 * One epoll loop drives C connections.  Each connection works in *batches*
 * (like redis-benchmark -P): it writes D requests at once, waits for all D
 * replies, then sends the next batch.  The latency of a request is the time
 * from the write of its batch to the arrival of its reply.
 *
 * Before the clock starts, every connection completes one PING round trip
 * (sends PING, reads +PONG): a server may accept the last connections of a
 * burst only much later (100-250 ms seen with 50 connections), and that
 * wait must not count as request latency.  Bounded by --max-seconds; any
 * other reply is fatal (exit 2).
 *
 * Modes:
 *   ping     PING                                  (sanity)
 *   addjob   ADDJOB <queue> <body> <T> [args]      (Disque produce; T is
 *                                                   --addjob-timeout, default 0)
 *   lpush    LPUSH <queue> <body>                  (Redis produce baseline)
 *   getack   GETJOB NOHANG FROM <queue>, then      (Disque consume,
 *            ACKJOB <id> for every job returned     two round trips per job)
 *   getack1  ACKJOB <id of job N> + GETJOB NOHANG   (Disque consume,
 *            FROM <queue> in one write              one round trip per job)
 *   rpop     RPOP <queue>                          (Redis consume baseline)
 *   getjob   GETJOB NOHANG FROM <queue>, no ack     (delivery alone)
 *   qadd     QADD <queue> 3600 <body> [args]       (consumer-group event)
 *   xadd     XADD <queue> * b <body>               (Redis Streams baseline)
 *   qget     QGET <queue> <group> [args], then one  (consumer groups: as getack1,
 *            QACK <queue> <group> <id> ...          the acks of a reply sent with
 *                                                   the next QGET)
 *   xread    XREADGROUP GROUP <group> c<conn>       (Redis Streams baseline: as
 *            [args] STREAMS <queue> >, then one     getack1; the group must exist,
 *            XACK <queue> <group> <id> ...          XGROUP CREATE)
 *
 * --group G1,G2,... (qget, xread; default g1): connection i reads as group
 * G[i mod n], so one run can drain a queue for several groups at once; with
 * --requests = events x groups it stops when every group got every event.
 * qget's extra arguments go after the group ("COUNT 100": a reply is an
 * array of [id, contents] entries; without COUNT a reply is one entry),
 * xread's before STREAMS ("COUNT 100").
 *
 * Extra arguments, --arg A (repeatable) or --args "A B ..." (split on
 * blanks): addjob appends them after <ms-timeout> (e.g. --args "REPLICATE
 * 3"); getack/getack1 put them in place of NOHANG, before FROM (e.g. --args
 * "TIMEOUT 1000" for a blocking GETJOB, or "NOHANG COUNT 100": every job of
 * a reply is then acked by one ACKJOB, whose null replies after the
 * timeout count towards --max-empty).  Other modes refuse them.
 *
 * --ports P1,P2,... spreads the connections round-robin over several ports
 * (connection i goes to P[i mod n]); --port P is the same as --ports P.
 * The JSON "port" field is the first port.
 *
 * In the consume modes --requests is the number of *jobs* to consume; null
 * replies are not counted, and a connection gives up after --max-empty
 * consecutive batches that brought no job (the queue ran dry, or every
 * reply was an error).
 *
 * getack1 does not work in batches.  Each connection keeps --pipeline D
 * GETJOBs in flight: it first writes D GETJOBs; then, for every GETJOB
 * reply that brings a job, it writes "ACKJOB <id>" and the next GETJOB
 * together in one write, so the ack of job N travels with the request for
 * job N+1.  Replies are matched to requests in order (a small FIFO per
 * connection).  When no more jobs are wanted, the last jobs are acked with
 * a lone ACKJOB, so every job received is acked.  ops counts only jobs
 * whose ACKJOB replied with the number of IDs sent (:1); any other count is
 * an error.  Latency samples are GETJOB replies only, from the write that
 * carried the GETJOB (i.e. one sample per round trip).  A null GETJOB reply
 * re-sends the GETJOB alone; after --max-empty x D null replies in a row
 * the connection stops asking (drained).
 *
 * Produce bodies are --body-size bytes of 'x' ending in a request counter,
 * so each is unique.
 *
 * Everything is bounded: --max-seconds (default 60) stops the run and the
 * partial results are reported; only loopback addresses are accepted.
 *
 * Output (text, or one JSON object with --json): ops (consume: jobs
 * received; getack1: jobs received *and* acked), elapsed_s, ops_per_sec,
 * lat_us {p50, p99, max, mean}, errors and first_error, null_replies,
 * received (consume: jobs returned), ack_requests/acked (getack, getack1),
 * conn_failures, drained (gave up on an empty queue), timed_out, complete.
 * The exit status is 0 whenever a report is printed (check errors and
 * complete), 2 on bad arguments or when a connection cannot be opened.
 *
 * No external libraries: the RESP reply parser is below (status, error,
 * integer, bulk, arrays incl. nested, RESP2 and RESP3 nulls).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

enum mode { M_PING, M_ADDJOB, M_LPUSH, M_GETACK, M_RPOP, M_GETACK1, M_GETJOB, M_QADD, M_XADD,
            M_QGET, M_XREAD };
static const char *mode_names[] = {"ping", "addjob", "lpush", "getack", "rpop", "getack1",
                                   "getjob", "qadd", "xadd", "qget", "xread"};
#define N_MODES 11

static struct {
    const char *host;
    int port;
    int conns;
    int pipeline;
    long long requests;
    enum mode mode;
    const char *queue;
    int body_size;
    int json;
    double max_seconds;
    int max_empty;
    const char *addjob_timeout; /* ADDJOB's <ms-timeout> argument */
} cfg = {"127.0.0.1", 7711, 1, 1, 100000, M_PING, "bench", 16, 0, 60.0, 3, "0"};

/* --ports: connection i goes to ports[i % nports] (default: just --port). */
#define MAX_PORTS 64
static int ports[MAX_PORTS];
static int nports;

/* --arg / --args: extra arguments (addjob: appended after <ms-timeout>;
 * getack/getack1: put in place of NOHANG, before FROM). */
#define MAX_EXTRA 64
static const char *extra[MAX_EXTRA];
static int nextra;
static char *extra_store[MAX_EXTRA]; /* --args strings we split (owned) */
static int nextra_store;

#define MAX_ID_LEN 128     /* longest job ID we keep for ACKJOB */
#define MAX_DEPTH 16       /* deepest nested array we accept */
#define READ_CHUNK 65536

/* --group (qget, xread): connection i reads as groups[i % ngroups]. */
#define MAX_GROUPS 64
static const char *groups[MAX_GROUPS] = {"g1"};
static int ngroups = 1, groups_given;
/* getack1, qget, xread: deliveries received and reads in flight, per group (one group,
 * index 0, in getack1). */
static long long group_received[MAX_GROUPS], group_inflight[MAX_GROUPS];

/* The modes where the acks of a reply travel with the next read (see getack1). */
static int is_g1(void) {
    return cfg.mode == M_GETACK1 || cfg.mode == M_QGET || cfg.mode == M_XREAD;
}

static int is_consume(void) {
    return cfg.mode == M_GETACK || cfg.mode == M_RPOP || cfg.mode == M_GETJOB || is_g1();
}

static int is_produce(void) {
    return cfg.mode == M_ADDJOB || cfg.mode == M_LPUSH || cfg.mode == M_QADD ||
           cfg.mode == M_XADD;
}

/* Job IDs a connection may hold for one ACKJOB batch: D GETJOBs, each bringing up to
 * COUNT jobs when the extra arguments hold "COUNT <n>". */
static int idcap = 1;

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A growable byte buffer; `off` is the consumed/written prefix. */
struct buf {
    char *p;
    size_t len, cap, off;
};

static void buf_reserve(struct buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->len + extra) ncap *= 2;
    b->p = realloc(b->p, ncap);
    if (!b->p) die("out of memory");
    b->cap = ncap;
}

static void buf_append(struct buf *b, const char *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* Drop the consumed prefix. */
static void buf_compact(struct buf *b) {
    if (b->off == 0) return;
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
}

/* Append one RESP command (array of bulk strings). */
static void append_cmd(struct buf *b, int argc, const char **argv, const size_t *lens) {
    char hdr[32];
    int n = snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
    buf_append(b, hdr, (size_t)n);
    for (int i = 0; i < argc; i++) {
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", lens[i]);
        buf_append(b, hdr, (size_t)n);
        buf_append(b, argv[i], lens[i]);
        buf_append(b, "\r\n", 2);
    }
}

/* ------------------------------------------------------------------ */
/* Latency histogram (log-linear, ~0.1% precision, microseconds)       */
/* ------------------------------------------------------------------ */
/* Values below 2048 get their own bucket; above, each power of two is
 * split into 1024 sub-buckets.  Covers up to 2^40 us. */

#define H_SUB 1024
#define H_BUCKETS (2 * H_SUB + 30 * H_SUB)
static uint64_t hist[H_BUCKETS];
static uint64_t hist_count, lat_max_us;
static double lat_sum_us;

static int msb64(uint64_t v) { return 63 - __builtin_clzll(v); }

static void hist_add(uint64_t us) {
    size_t idx;
    if (us < 2 * H_SUB) {
        idx = (size_t)us;
    } else {
        int s = msb64(us) - 10; /* us >> s is in [1024, 2048) */
        if (s > 30) s = 30, us = (2ull * H_SUB << 30) - 1;
        idx = 2 * H_SUB + (size_t)(s - 1) * H_SUB + (size_t)((us >> s) - H_SUB);
        if (idx >= H_BUCKETS) idx = H_BUCKETS - 1;
    }
    hist[idx]++;
    hist_count++;
    lat_sum_us += (double)us;
    if (us > lat_max_us) lat_max_us = us;
}

/* Representative value (midpoint) of a bucket. */
static double hist_value(size_t idx) {
    if (idx < 2 * H_SUB) return (double)idx;
    size_t s = (idx - 2 * H_SUB) / H_SUB + 1;
    uint64_t base = ((idx - 2 * H_SUB) % H_SUB + H_SUB) << s;
    return (double)base + (double)(1ull << s) / 2.0;
}

static double hist_pct(double p) {
    if (hist_count == 0) return 0;
    uint64_t want = (uint64_t)(p / 100.0 * (double)hist_count + 0.999999);
    if (want < 1) want = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < H_BUCKETS; i++) {
        seen += hist[i];
        if (seen >= want) {
            double v = hist_value(i);
            return v > (double)lat_max_us ? (double)lat_max_us : v;
        }
    }
    return (double)lat_max_us;
}

/* ------------------------------------------------------------------ */
/* RESP reply parser                                                   */
/* ------------------------------------------------------------------ */
/* resp_parse() parses one complete reply starting at buf[pos]:
 *   returns  1 and sets *end and *out when a whole reply is present,
 *            0 when more bytes are needed,
 *           -1 on a protocol error (with a message in *perr).
 * Only the top-level reply is described in *out; for arrays, the raw
 * bytes [pos, *end) can be walked again with resp_parse() to look at
 * the elements (see extract_job_id). */

enum rtype { R_STATUS, R_ERROR, R_INT, R_BULK, R_ARRAY, R_NULL };

struct reply {
    enum rtype type;
    const char *str; /* status/error/bulk payload (not NUL terminated) */
    size_t len;
    long long integer; /* integer value, or element count of an array */
};

/* Find CRLF-terminated line at [pos, len); returns index of '\r' or -1. */
static long find_crlf(const char *buf, size_t len, size_t pos) {
    for (size_t i = pos; i + 1 < len; i++)
        if (buf[i] == '\r') return buf[i + 1] == '\n' ? (long)i : -2;
    return -1;
}

static int parse_ll(const char *s, size_t n, long long *out) {
    if (n == 0 || n > 20) return 0;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-' || s[0] == '+') neg = s[0] == '-', i = 1;
    if (i == n) return 0;
    long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

static int resp_parse_depth(const char *buf, size_t len, size_t pos, size_t *end,
                            struct reply *out, const char **perr, int depth) {
    if (pos >= len) return 0;
    if (depth > MAX_DEPTH) { *perr = "arrays nested too deeply"; return -1; }
    char t = buf[pos];
    long cr = find_crlf(buf, len, pos + 1);
    if (cr == -1) return 0;
    if (cr == -2) { *perr = "bare CR in reply header"; return -1; }
    const char *line = buf + pos + 1;
    size_t llen = (size_t)cr - pos - 1;
    size_t after = (size_t)cr + 2;
    long long n;

    switch (t) {
    case '+':
    case '-':
        out->type = t == '+' ? R_STATUS : R_ERROR;
        out->str = line;
        out->len = llen;
        *end = after;
        return 1;
    case ':':
        if (!parse_ll(line, llen, &n)) { *perr = "bad integer reply"; return -1; }
        out->type = R_INT;
        out->integer = n;
        *end = after;
        return 1;
    case '_': /* RESP3 null */
        out->type = R_NULL;
        *end = after;
        return 1;
    case '$':
        if (!parse_ll(line, llen, &n) || n < -1) { *perr = "bad bulk length"; return -1; }
        if (n == -1) { out->type = R_NULL; *end = after; return 1; }
        if (after + (size_t)n + 2 > len) return 0;
        if (buf[after + n] != '\r' || buf[after + n + 1] != '\n') {
            *perr = "bulk string not terminated by CRLF";
            return -1;
        }
        out->type = R_BULK;
        out->str = buf + after;
        out->len = (size_t)n;
        *end = after + (size_t)n + 2;
        return 1;
    case '*': {
        if (!parse_ll(line, llen, &n) || n < -1) { *perr = "bad array length"; return -1; }
        if (n == -1) { out->type = R_NULL; *end = after; return 1; }
        size_t p = after;
        for (long long i = 0; i < n; i++) {
            struct reply sub;
            int r = resp_parse_depth(buf, len, p, &p, &sub, perr, depth + 1);
            if (r <= 0) return r;
        }
        out->type = R_ARRAY;
        out->integer = n;
        *end = p;
        return 1;
    }
    default:
        *perr = "unknown reply type byte";
        return -1;
    }
}

static int resp_parse(const char *buf, size_t len, size_t pos, size_t *end,
                      struct reply *out, const char **perr) {
    return resp_parse_depth(buf, len, pos, end, out, perr, 0);
}

/* Walk a complete GETJOB reply (array of [queue, id, body, ...] arrays)
 * and call fn(id) for every job.  Returns the number of jobs, or -1 if
 * the reply does not have the expected shape. */
static int for_each_job(const char *buf, size_t end, size_t pos,
                        void (*fn)(void *, const char *, size_t), void *ctx) {
    struct reply top, job, el;
    const char *perr;
    size_t p;
    if (resp_parse(buf, end, pos, &p, &top, &perr) != 1 || top.type != R_ARRAY) return -1;
    /* Re-walk from the first element (skip the "*n\r\n" header). */
    p = (size_t)(find_crlf(buf, end, pos + 1) + 2);
    for (long long i = 0; i < top.integer; i++) {
        size_t jstart = p;
        if (resp_parse(buf, end, jstart, &p, &job, &perr) != 1) return -1;
        if (job.type != R_ARRAY || job.integer < 2) return -1;
        size_t q = (size_t)(find_crlf(buf, end, jstart + 1) + 2);
        if (resp_parse(buf, end, q, &q, &el, &perr) != 1) return -1; /* queue */
        if (resp_parse(buf, end, q, &q, &el, &perr) != 1) return -1; /* id */
        if (el.type != R_BULK && el.type != R_STATUS) return -1;
        fn(ctx, el.str, el.len);
    }
    return (int)top.integer;
}

/* The start of a complete array reply's first element. */
static size_t first_elem(const char *buf, size_t end, size_t pos) {
    return (size_t)(find_crlf(buf, end, pos + 1) + 2);
}

/* Walk a complete QGET reply and call fn(id) for every event: [id, contents, ...] (no
 * COUNT) or an array of such entries (COUNT). Returns the number of events, or -1 if the
 * reply does not have the expected shape. */
static int for_each_event(const char *buf, size_t end, size_t pos,
                          void (*fn)(void *, const char *, size_t), void *ctx) {
    struct reply top, el;
    const char *perr;
    size_t p;
    if (resp_parse(buf, end, pos, &p, &top, &perr) != 1 || top.type != R_ARRAY) return -1;
    if (top.integer == 0) return 0;
    p = first_elem(buf, end, pos);
    size_t q = p;
    if (resp_parse(buf, end, q, &q, &el, &perr) != 1) return -1;
    if (el.type == R_BULK) { fn(ctx, el.str, el.len); return 1; } /* one entry */
    for (long long i = 0; i < top.integer; i++) {
        size_t estart = p;
        if (resp_parse(buf, end, estart, &p, &el, &perr) != 1) return -1;
        if (el.type != R_ARRAY || el.integer < 2) return -1;
        q = first_elem(buf, end, estart);
        if (resp_parse(buf, end, q, &q, &el, &perr) != 1 || el.type != R_BULK) return -1;
        fn(ctx, el.str, el.len);
    }
    return (int)top.integer;
}

/* Walk a complete XREADGROUP reply ([[stream, [[id, [field, value, ...]], ...]], ...])
 * and call fn(id) for every entry. Returns the number of entries, or -1 on another
 * shape. */
static int for_each_entry(const char *buf, size_t end, size_t pos,
                          void (*fn)(void *, const char *, size_t), void *ctx) {
    struct reply top, st, el;
    const char *perr;
    size_t p, q, r;
    int n = 0;
    if (resp_parse(buf, end, pos, &p, &top, &perr) != 1 || top.type != R_ARRAY) return -1;
    p = first_elem(buf, end, pos);
    for (long long i = 0; i < top.integer; i++) {
        size_t sstart = p;
        if (resp_parse(buf, end, sstart, &p, &st, &perr) != 1) return -1;
        if (st.type != R_ARRAY || st.integer != 2) return -1;
        q = first_elem(buf, end, sstart);
        if (resp_parse(buf, end, q, &q, &el, &perr) != 1) return -1; /* stream name */
        size_t estart = q;
        if (resp_parse(buf, end, estart, &q, &el, &perr) != 1 || el.type != R_ARRAY) return -1;
        long long entries = el.integer;
        r = first_elem(buf, end, estart);
        for (long long j = 0; j < entries; j++) {
            size_t one = r;
            if (resp_parse(buf, end, one, &r, &el, &perr) != 1) return -1;
            if (el.type != R_ARRAY || el.integer < 1) return -1;
            size_t idp = first_elem(buf, end, one);
            if (resp_parse(buf, end, idp, &idp, &el, &perr) != 1 || el.type != R_BULK) return -1;
            fn(ctx, el.str, el.len);
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ */
/* Connections and global state                                        */
/* ------------------------------------------------------------------ */

enum phase { PH_MAIN, PH_ACK };

/* getack1: one request in flight, to match with its reply. */
struct g1req {
    uint64_t ts;      /* when the write that carried it was issued */
    int nids;         /* ACKJOB: number of IDs it acks; GETJOB: 0 */
};

struct conn {
    int fd;
    int idx;
    int port;
    struct buf out, in;
    enum phase phase;
    int pending;      /* replies still expected for the current batch */
    uint64_t batch_ts;
    int batch_jobs;   /* jobs received in the current GETJOB/RPOP batch */
    int nids;         /* job IDs waiting to be acked */
    char *ids;        /* pipeline * MAX_ID_LEN bytes */
    size_t *idlens;
    int empty_batches;
    int done;
    int want_out;     /* EPOLLOUT currently registered */
    /* getack1 only: the requests in flight, oldest first (a ring). */
    struct g1req *ring;
    int rcap, rhead, rcount;
    int unstamped;    /* newest entries not yet given their write time */
    int stopping;     /* no more GETJOBs on this connection */
    const char *group; /* qget, xread: the group this connection reads as */
    int gi;            /* its index in groups[] (0 in the other modes) */
    struct buf read_tmpl; /* qget, xread: this connection's read command */
};

static struct conn *conns;
static int epfd;
static int live_conns;

/* Counters (the whole program is single-threaded). */
static long long issued;        /* produce: requests reserved */
static long long inflight_get;  /* consume: GETJOB/RPOP in flight */
static long long ops;           /* successful ops (consume: jobs received) */
static long long replies;       /* every reply, any kind */
static long long errors;        /* error replies (and malformed replies) */
static long long null_replies;
static long long acked, ack_requests;
static long long received;      /* consume: jobs returned by GETJOB/RPOP */
static long long conn_failures;
static char first_error[256];
static int drained, timed_out;
static uint64_t t_start, t_last;

static void note_error(const char *s, size_t n) {
    errors++;
    if (!first_error[0]) {
        if (n >= sizeof first_error) n = sizeof first_error - 1;
        memcpy(first_error, s, n);
        first_error[n] = 0;
        if (!first_error[0]) strcpy(first_error, "(empty error)");
    }
}

static void note_error_str(const char *s) { note_error(s, strlen(s)); }

static void update_events(struct conn *c) {
    int want = c->out.off < c->out.len;
    if (want == c->want_out) return;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl: %s", strerror(errno));
    c->want_out = want;
}

static void conn_finish(struct conn *c) {
    if (c->done) return;
    c->done = 1;
    live_conns--;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
}

static void conn_fail(struct conn *c, const char *why) {
    if (c->done) return;
    conn_failures++;
    char msg[200];
    snprintf(msg, sizeof msg, "connection %d: %s", c->idx, why);
    note_error_str(msg);
    conn_finish(c);
}

/* Write as much pending output as the socket takes. */
static void flush_out(struct conn *c) {
    while (c->out.off < c->out.len) {
        ssize_t w = write(c->fd, c->out.p + c->out.off, c->out.len - c->out.off);
        if (w > 0) { c->out.off += (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        conn_fail(c, w < 0 ? strerror(errno) : "write returned 0");
        return;
    }
    if (c->out.off == c->out.len) c->out.off = c->out.len = 0;
    update_events(c);
}

/* The main command of the run (PING / ADDJOB / LPUSH / GETJOB / RPOP) is
 * encoded once into `tmpl`; each request is one memcpy of it.  For produce
 * modes the body sits at tmpl_body_off and its tail is overwritten with a
 * request counter, so every body is unique. */
static struct buf tmpl;
static size_t tmpl_body_off;
static long long body_counter;

static void build_template(void) {
    size_t ql = strlen(cfg.queue), bl = (size_t)cfg.body_size;
    char *body = malloc(bl);
    if (!body) die("out of memory");
    memset(body, 'x', bl);
    switch (cfg.mode) {
    case M_PING: {
        const char *argv[] = {"PING"};
        size_t lens[] = {4};
        append_cmd(&tmpl, 1, argv, lens);
        break;
    }
    case M_ADDJOB:
    case M_LPUSH:
    case M_QADD:
    case M_XADD: {
        /* ADDJOB <queue> <body> <ms-timeout> [extra ...] / LPUSH <queue> <body> /
         * QADD <queue> 3600 <body> [extra ...] / XADD <queue> * b <body> */
        const char *argv[5 + MAX_EXTRA] = {"ADDJOB", cfg.queue, body, cfg.addjob_timeout};
        size_t lens[5 + MAX_EXTRA] = {6, ql, bl, strlen(cfg.addjob_timeout)};
        int argc = 4, bi = 2; /* bi: the body's argument */
        if (cfg.mode == M_LPUSH) argv[0] = "LPUSH", lens[0] = 5, argc = 3;
        if (cfg.mode == M_QADD) {
            argv[0] = "QADD", lens[0] = 4, argv[2] = "3600", lens[2] = 4;
            argv[3] = body, lens[3] = bl, bi = 3;
        }
        if (cfg.mode == M_XADD) {
            argv[0] = "XADD", lens[0] = 4, argv[2] = "*", lens[2] = 1, argv[3] = "b";
            lens[3] = 1, argv[4] = body, lens[4] = bl, argc = 5, bi = 4;
        }
        for (int i = 0; i < nextra; i++, argc++)
            argv[argc] = extra[i], lens[argc] = strlen(extra[i]);
        append_cmd(&tmpl, argc, argv, lens);
        /* The body's payload starts after the "*argc" header, the arguments
         * before it, and its "$len" line. */
        char hdr[32];
        size_t off = (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
        for (int i = 0; i < bi; i++)
            off += (size_t)snprintf(hdr, sizeof hdr, "$%zu\r\n", lens[i]) + lens[i] + 2;
        tmpl_body_off = off + (size_t)snprintf(hdr, sizeof hdr, "$%zu\r\n", bl);
        break;
    }
    case M_QGET:
    case M_XREAD:
        break; /* one read command per connection: build_read_template */
    case M_GETACK:
    case M_GETACK1:
    case M_GETJOB: {
        /* GETJOB NOHANG FROM <queue>, or GETJOB <extra ...> FROM <queue> */
        const char *argv[3 + MAX_EXTRA] = {"GETJOB", "NOHANG"};
        size_t lens[3 + MAX_EXTRA] = {6, 6};
        int argc = 1;
        if (nextra == 0) argc = 2;
        for (int i = 0; i < nextra; i++, argc++)
            argv[argc] = extra[i], lens[argc] = strlen(extra[i]);
        argv[argc] = "FROM", lens[argc++] = 4;
        argv[argc] = cfg.queue, lens[argc++] = ql;
        append_cmd(&tmpl, argc, argv, lens);
        break;
    }
    case M_RPOP: {
        const char *argv[] = {"RPOP", cfg.queue};
        size_t lens[] = {4, ql};
        append_cmd(&tmpl, 2, argv, lens);
        break;
    }
    }
    free(body);
}

/* qget: QGET <queue> <group> [extra ...]; xread: XREADGROUP GROUP <group> c<conn>
 * [extra ...] STREAMS <queue> >. */
static void build_read_template(struct conn *c) {
    char consumer[32];
    snprintf(consumer, sizeof consumer, "c%d", c->idx);
    const char *argv[8 + MAX_EXTRA];
    int argc = 0;
    if (cfg.mode == M_QGET) {
        argv[argc++] = "QGET", argv[argc++] = cfg.queue, argv[argc++] = c->group;
    } else {
        argv[argc++] = "XREADGROUP", argv[argc++] = "GROUP", argv[argc++] = c->group;
        argv[argc++] = consumer;
    }
    for (int i = 0; i < nextra; i++) argv[argc++] = extra[i];
    if (cfg.mode == M_XREAD) argv[argc++] = "STREAMS", argv[argc++] = cfg.queue, argv[argc++] = ">";
    size_t lens[8 + MAX_EXTRA];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    append_cmd(&c->read_tmpl, argc, argv, lens);
}

/* Append `take` copies of the template (with unique bodies if any). */
static void append_main_cmds(struct buf *b, int take) {
    int produce = is_produce();
    buf_reserve(b, tmpl.len * (size_t)take);
    for (int i = 0; i < take; i++) {
        char *dst = b->p + b->len;
        memcpy(dst, tmpl.p, tmpl.len);
        b->len += tmpl.len;
        if (produce) {
            /* Write the counter's decimal digits at the end of the body. */
            char *end = dst + tmpl_body_off + cfg.body_size, *lim = dst + tmpl_body_off;
            for (unsigned long long v = (unsigned long long)body_counter++; end > lim;) {
                *--end = (char)('0' + v % 10);
                if ((v /= 10) == 0) break;
            }
        }
    }
}

/* Append "ACKJOB <id>". */
static void append_ackjob(struct buf *b, const char *id, size_t len) {
    char hdr[48];
    int n = snprintf(hdr, sizeof hdr, "*2\r\n$6\r\nACKJOB\r\n$%zu\r\n", len);
    buf_reserve(b, (size_t)n + len + 2);
    memcpy(b->p + b->len, hdr, (size_t)n);
    memcpy(b->p + b->len + n, id, len);
    memcpy(b->p + b->len + n + len, "\r\n", 2);
    b->len += (size_t)n + len + 2;
}

/* Start the next batch on a connection, or finish it if there is no work
 * left.  Called when the connection has no replies outstanding. */
static void next_batch(struct conn *c) {
    int take;

    if (c->phase == PH_ACK) {
        /* Ack every job the GETJOB batch returned, one ACKJOB per job. */
        for (int i = 0; i < c->nids; i++)
            append_ackjob(&c->out, c->ids + (size_t)i * MAX_ID_LEN, c->idlens[i]);
        take = c->nids;
        c->nids = 0;
        ack_requests += take;
    } else if (is_consume()) {
        if (c->empty_batches >= cfg.max_empty) { drained = 1; conn_finish(c); return; }
        long long left = cfg.requests - ops - inflight_get;
        take = left < cfg.pipeline ? (int)(left > 0 ? left : 0) : cfg.pipeline;
        if (take == 0) { conn_finish(c); return; }
        inflight_get += take;
        c->batch_jobs = 0;
        append_main_cmds(&c->out, take);
    } else {
        long long left = cfg.requests - issued;
        take = left < cfg.pipeline ? (int)left : cfg.pipeline;
        if (take <= 0) { conn_finish(c); return; }
        issued += take;
        append_main_cmds(&c->out, take);
    }
    c->pending = take;
    c->batch_ts = now_ns();
    flush_out(c);
}

static void collect_id(void *ctx, const char *id, size_t len) {
    struct conn *c = ctx;
    if (len >= MAX_ID_LEN || c->nids >= idcap) {
        note_error_str("job ID too long or too many jobs in one GETJOB reply");
        return;
    }
    memcpy(c->ids + (size_t)c->nids * MAX_ID_LEN, id, len);
    c->ids[(size_t)c->nids * MAX_ID_LEN + len] = 0;
    c->idlens[c->nids++] = len;
}

/* ------------------------------------------------------------------ */
/* getack1: ACKJOB of job N and GETJOB for job N+1 in one write        */
/* ------------------------------------------------------------------ */

static void g1_push(struct conn *c, int nids) {
    if (c->rcount >= c->rcap) die("internal: getack1 request ring full");
    struct g1req *q = &c->ring[(c->rhead + c->rcount) % c->rcap];
    q->ts = 0;
    q->nids = nids;
    c->rcount++;
    c->unstamped++;
}

/* Queue one GETJOB if more jobs are wanted; returns 1 if it did. */
static int g1_get(struct conn *c) {
    /* Each group wants its share of --requests: a group that ran dry must not hold
     * back the reads of another (a connection with nothing to read stops). */
    long long want = cfg.requests / ngroups + (c->gi < cfg.requests % ngroups);
    if (c->stopping || want - group_received[c->gi] - group_inflight[c->gi] <= 0) return 0;
    if (c->read_tmpl.len) buf_append(&c->out, c->read_tmpl.p, c->read_tmpl.len);
    else append_main_cmds(&c->out, 1);
    inflight_get++;
    group_inflight[c->gi]++;
    g1_push(c, 0);
    return 1;
}

/* Write what was queued, stamping the new requests with the write time. */
static void g1_send(struct conn *c) {
    uint64_t t = now_ns();
    for (int i = c->rcount - c->unstamped; i < c->rcount; i++)
        c->ring[(c->rhead + i) % c->rcap].ts = t;
    c->unstamped = 0;
    flush_out(c);
}

static void g1_start(struct conn *c) {
    for (int i = 0; i < cfg.pipeline; i++)
        if (!g1_get(c)) break;
    if (c->rcount == 0) { conn_finish(c); return; }
    g1_send(c);
}

/* Append "ACKJOB <id> [<id> ...]" (xread: "XACK <queue> <group> <id> ...", qget: "QACK
 * <queue> <group> <id> ...") for the IDs held in c->ids. */
static void g1_append_ack(struct conn *c) {
    char hdr[32];
    int n;
    if (cfg.mode == M_XREAD || cfg.mode == M_QGET) {
        n = snprintf(hdr, sizeof hdr, "*%d\r\n", c->nids + 3);
        buf_append(&c->out, hdr, (size_t)n);
        const char *pre[] = {cfg.mode == M_QGET ? "QACK" : "XACK", cfg.queue, c->group};
        for (int i = 0; i < 3; i++) {
            n = snprintf(hdr, sizeof hdr, "$%zu\r\n", strlen(pre[i]));
            buf_append(&c->out, hdr, (size_t)n);
            buf_append(&c->out, pre[i], strlen(pre[i]));
            buf_append(&c->out, "\r\n", 2);
        }
    } else {
        n = snprintf(hdr, sizeof hdr, "*%d\r\n$6\r\nACKJOB\r\n", c->nids + 1);
        buf_append(&c->out, hdr, (size_t)n);
    }
    for (int i = 0; i < c->nids; i++) {
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", c->idlens[i]);
        buf_append(&c->out, hdr, (size_t)n);
        buf_append(&c->out, c->ids + (size_t)i * MAX_ID_LEN, c->idlens[i]);
        buf_append(&c->out, "\r\n", 2);
    }
    ack_requests++;
    g1_push(c, c->nids);
    c->nids = 0;
}

/* Account one complete reply; queue the follow-up requests (sent later,
 * by g1_send, together with the others of this read). */
static void g1_reply(struct conn *c, const struct reply *r, size_t pos, size_t end, uint64_t t) {
    struct g1req q = c->ring[c->rhead];
    c->rhead = (c->rhead + 1) % c->rcap;
    c->rcount--;
    replies++;
    t_last = t;
    if (r->type == R_ERROR) note_error(r->str, r->len);

    if (q.nids > 0) { /* ACKJOB reply */
        if (r->type == R_INT) {
            acked += r->integer;
            if (r->integer == q.nids) {
                ops += q.nids;
            } else {
                char msg[96];
                snprintf(msg, sizeof msg, "ack acknowledged %lld of %d job(s)", r->integer,
                         q.nids);
                note_error_str(msg);
                if (r->integer > 0 && r->integer < q.nids) ops += r->integer;
            }
        } else if (r->type != R_ERROR) {
            note_error_str("unexpected ack reply type");
        }
        return;
    }

    /* GETJOB reply */
    inflight_get--;
    group_inflight[c->gi]--;
    hist_add((t - q.ts) / 1000);
    int n = 0;
    c->nids = 0;
    if (r->type == R_NULL) null_replies++;
    else if (r->type == R_ARRAY) {
        n = (cfg.mode == M_QGET ? for_each_event : cfg.mode == M_XREAD ? for_each_entry
                                                                      : for_each_job)(
            c->in.p, end, pos, collect_id, c);
        if (n < 0) { note_error_str("unexpected read reply shape"); n = 0; c->nids = 0; }
        else if (n == 0) null_replies++;
    } else if (r->type != R_ERROR) {
        note_error_str("unexpected read reply type");
    }
    if (n > 0 && c->nids > 0) {
        received += n;
        group_received[c->gi] += n;
        c->empty_batches = 0;
        g1_append_ack(c); /* the ack of this job ... */
        g1_get(c);        /* ... and the request for the next, in one write */
        return;
    }
    if (++c->empty_batches >= cfg.max_empty * cfg.pipeline) {
        drained = 1;
        c->stopping = 1;
        return;
    }
    g1_get(c);
}

static void g1_on_replies(struct conn *c, uint64_t t) {
    for (;;) {
        struct reply rep;
        const char *perr = NULL;
        size_t end;
        int st = resp_parse(c->in.p, c->in.len, c->in.off, &end, &rep, &perr);
        if (st == 0) break;
        if (st < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "protocol error: %s", perr);
            conn_fail(c, msg);
            return;
        }
        if (c->rcount == 0) { conn_fail(c, "unsolicited reply"); return; }
        g1_reply(c, &rep, c->in.off, end, t);
        c->in.off = end;
    }
    buf_compact(&c->in);
    if (c->rcount == 0) { conn_finish(c); return; }
    if (c->unstamped) g1_send(c);
}

/* Account one complete reply [pos, end) received at time `t`. */
static void handle_reply(struct conn *c, const struct reply *r, size_t pos, size_t end,
                         uint64_t t) {
    replies++;
    hist_add((t - c->batch_ts) / 1000);
    t_last = t;

    if (r->type == R_ERROR) note_error(r->str, r->len);

    if (c->phase == PH_ACK) {
        if (r->type == R_INT) acked += r->integer;
        else if (r->type != R_ERROR) note_error_str("unexpected ACKJOB reply type");
        return;
    }
    if (!is_consume()) {
        if (r->type == R_ERROR) return;
        if (cfg.mode == M_PING ? r->type == R_STATUS
                               : (cfg.mode == M_LPUSH ? r->type == R_INT
                                                      : (r->type == R_STATUS || r->type == R_BULK)))
            ops++;
        else
            note_error_str("unexpected reply type");
        return;
    }
    /* consume modes */
    inflight_get--;
    if (r->type == R_NULL) { null_replies++; return; }
    if (r->type == R_ERROR) return;
    if (cfg.mode == M_RPOP) {
        if (r->type == R_BULK) { ops++; received++; c->batch_jobs++; }
        else note_error_str("unexpected RPOP reply type");
        return;
    }
    int n = r->type == R_ARRAY ? for_each_job(c->in.p, end, pos, collect_id, c) : -1;
    if (n < 0) { note_error_str("unexpected GETJOB reply shape"); return; }
    if (n == 0) { null_replies++; return; }
    ops += n;
    received += n;
    c->batch_jobs += n;
}

/* Read what is available and process complete replies. */
static void on_readable(struct conn *c) {
    buf_reserve(&c->in, READ_CHUNK);
    ssize_t r = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
    if (r == 0) { conn_fail(c, "connection closed by server"); return; }
    if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        conn_fail(c, strerror(errno));
        return;
    }
    c->in.len += (size_t)r;
    uint64_t t = now_ns();
    if (is_g1()) { g1_on_replies(c, t); return; }

    for (;;) {
        struct reply rep;
        const char *perr = NULL;
        size_t end;
        int st = resp_parse(c->in.p, c->in.len, c->in.off, &end, &rep, &perr);
        if (st == 0) break;
        if (st < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "protocol error: %s", perr);
            conn_fail(c, msg);
            return;
        }
        if (c->pending <= 0) { conn_fail(c, "unsolicited reply"); return; }
        handle_reply(c, &rep, c->in.off, end, t);
        c->in.off = end;
        if (--c->pending == 0) {
            /* Batch complete: decide what comes next. */
            if (c->phase == PH_ACK) {
                c->phase = PH_MAIN;
            } else if (is_consume()) {
                c->empty_batches = c->batch_jobs ? 0 : c->empty_batches + 1;
                if (cfg.mode == M_GETACK && c->nids > 0) c->phase = PH_ACK;
                else c->nids = 0; /* getjob: nothing to ack */
            }
            next_batch(c);
            if (c->done) return;
        }
    }
    buf_compact(&c->in);
}

/* ------------------------------------------------------------------ */
/* Setup, main loop, report                                            */
/* ------------------------------------------------------------------ */

static void usage(void) {
    fprintf(stderr,
            "usage: loadgen [--host 127.0.0.1] [--port 7711] [--conns C] [--pipeline D]\n"
            "               [--requests N] [--mode ping|addjob|lpush|getack|getack1|getjob|rpop|\n"
            "                                      qadd|xadd|qget|xread] [--group G1,G2,...]\n"
            "               [--queue Q] [--body-size 16] [--max-seconds 60]\n"
            "               [--max-empty 3] [--json]\n"
            "               [--ports P1,P2,...] [--addjob-timeout MS]\n"
            "               [--arg A]... [--args \"A B ...\"]\n");
    exit(2);
}

static long long arg_num(const char *opt, const char *v, long long lo, long long hi) {
    char *e;
    errno = 0;
    long long n = strtoll(v, &e, 10);
    if (errno || *e || n < lo || n > hi)
        die("%s: expected an integer in [%lld, %lld], got '%s'", opt, lo, hi, v);
    return n;
}

static void add_extra(const char *a) {
    if (nextra >= MAX_EXTRA) die("too many --arg/--args arguments (max %d)", MAX_EXTRA);
    if (!*a) die("--arg: empty argument");
    extra[nextra++] = a;
}

/* --args "A B C": whitespace-separated, each word one argument. */
static void add_extra_words(const char *v) {
    if (nextra_store >= MAX_EXTRA) die("too many --args options");
    char *copy = strdup(v);
    if (!copy) die("out of memory");
    extra_store[nextra_store++] = copy;
    for (char *save = NULL, *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        add_extra(w);
}

static void parse_groups(const char *v) {
    char *copy = strdup(v), *save = NULL; /* kept: groups[] points into it */
    if (!copy) die("out of memory");
    ngroups = 0;
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (ngroups >= MAX_GROUPS) die("--group: at most %d groups", MAX_GROUPS);
        groups[ngroups++] = w;
    }
    if (ngroups == 0) die("--group: expected a comma-separated list of group names");
    groups_given = 1;
}

static void parse_ports(const char *v) {
    char *copy = strdup(v), *save = NULL;
    if (!copy) die("out of memory");
    nports = 0;
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (nports >= MAX_PORTS) die("--ports: at most %d ports", MAX_PORTS);
        ports[nports++] = (int)arg_num("--ports", w, 1, 65535);
    }
    free(copy);
    if (nports == 0) die("--ports: expected a comma-separated list of ports");
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) { cfg.json = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--port")) cfg.port = (int)arg_num(a, v, 1, 65535);
        else if (!strcmp(a, "--ports")) parse_ports(v);
        else if (!strcmp(a, "--group")) parse_groups(v);
        else if (!strcmp(a, "--arg")) add_extra(v);
        else if (!strcmp(a, "--args")) add_extra_words(v);
        else if (!strcmp(a, "--addjob-timeout")) {
            arg_num(a, v, 0, 1000000000000LL);
            cfg.addjob_timeout = v;
        }
        else if (!strcmp(a, "--conns")) cfg.conns = (int)arg_num(a, v, 1, 10000);
        else if (!strcmp(a, "--pipeline")) cfg.pipeline = (int)arg_num(a, v, 1, 100000);
        else if (!strcmp(a, "--requests")) cfg.requests = arg_num(a, v, 0, 1000000000000LL);
        else if (!strcmp(a, "--queue")) cfg.queue = v;
        else if (!strcmp(a, "--body-size")) cfg.body_size = (int)arg_num(a, v, 1, 64 << 20);
        else if (!strcmp(a, "--max-empty")) cfg.max_empty = (int)arg_num(a, v, 1, 1000000);
        else if (!strcmp(a, "--max-seconds")) {
            char *e;
            cfg.max_seconds = strtod(v, &e);
            if (*e || cfg.max_seconds <= 0 || cfg.max_seconds > 86400) die("bad --max-seconds");
        } else if (!strcmp(a, "--mode")) {
            int found = 0;
            for (int m = 0; m < N_MODES; m++)
                if (!strcmp(v, mode_names[m])) cfg.mode = (enum mode)m, found = 1;
            if (!found) die("unknown --mode '%s'", v);
        } else usage();
    }
    if (nports == 0) ports[nports++] = cfg.port;
    cfg.port = ports[0];
    if (nextra && cfg.mode != M_ADDJOB && cfg.mode != M_QADD &&
        !(is_consume() && cfg.mode != M_RPOP))
        die("--arg/--args apply to the addjob, qadd, getack, getack1, getjob, qget and xread "
            "modes only");
    if (groups_given && cfg.mode != M_QGET && cfg.mode != M_XREAD)
        die("--group applies to the qget and xread modes only");
    for (int i = 0; is_consume() && i + 1 < nextra; i++)
        if (!strcasecmp(extra[i], "COUNT")) idcap = (int)arg_num("COUNT", extra[i + 1], 1, 100000);
    idcap *= cfg.pipeline;
}

/* Resolve --host, refusing anything that is not a loopback address. */
static struct sockaddr_in loopback_addr(void) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port)};
    /* (open_conns sets each connection's port from --ports.) */
    const char *h = strcmp(cfg.host, "localhost") ? cfg.host : "127.0.0.1";
    if (inet_pton(AF_INET, h, &sa.sin_addr) != 1)
        die("--host must be an IPv4 loopback address (127.x.x.x or localhost), got '%s'", cfg.host);
    if ((ntohl(sa.sin_addr.s_addr) >> 24) != 127)
        die("refusing non-loopback host '%s': this tool only targets 127.0.0.0/8", cfg.host);
    return sa;
}

static void open_conns(void) {
    struct sockaddr_in sa = loopback_addr();
    conns = calloc((size_t)cfg.conns, sizeof *conns);
    if (!conns) die("out of memory");
    for (int i = 0; i < cfg.conns; i++) {
        struct conn *c = &conns[i];
        c->idx = i;
        c->port = ports[i % nports];
        sa.sin_port = htons((uint16_t)c->port);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0) die("socket: %s", strerror(errno));
        struct timeval tv = {5, 0}; /* bound a blocking connect */
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("connect %s:%d (connection %d): %s", cfg.host, c->port, i, strerror(errno));
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl: %s", strerror(errno));
        if (is_consume() && cfg.mode != M_RPOP) {
            c->ids = malloc((size_t)idcap * MAX_ID_LEN);
            c->idlens = malloc((size_t)idcap * sizeof *c->idlens);
            if (!c->ids || !c->idlens) die("out of memory");
        }
        if (cfg.mode == M_QGET || cfg.mode == M_XREAD) {
            c->gi = i % ngroups;
            c->group = groups[c->gi];
            build_read_template(c);
        }
        if (is_g1()) {
            /* D reads + the acks of D replies at most */
            c->rcap = 2 * cfg.pipeline + 1;
            c->ring = calloc((size_t)c->rcap, sizeof *c->ring);
            if (!c->ring) die("out of memory");
        }
    }
    live_conns = cfg.conns;
}

/* Warm-up, before the clock starts: every connection sends one PING and
 * waits for its +PONG.  A server may accept the last connections of a burst
 * much later than the client-side connect() returns (100-250 ms seen with
 * 50 connections on uvloop); without this, that delay would be measured as
 * the latency of those connections' first requests.  Bounded by
 * --max-seconds; anything but +PONG is fatal (exit 2). */
static void warm_up(void) {
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    for (int i = 0; i < cfg.conns; i++) {
        struct conn *c = &conns[i];
        ssize_t w;
        do w = write(c->fd, ping, sizeof ping - 1);
        while (w < 0 && errno == EINTR);
        if (w != (ssize_t)(sizeof ping - 1))
            die("warm-up: PING on connection %d (port %d): %s", i, c->port,
                w < 0 ? strerror(errno) : "short write");
    }
    int waiting = cfg.conns;
    char *ok = calloc((size_t)cfg.conns, 1);
    if (!ok) die("out of memory");
    uint64_t deadline = now_ns() + (uint64_t)(cfg.max_seconds * 1e9);
    struct epoll_event evs[256];
    while (waiting > 0) {
        uint64_t t = now_ns();
        if (t >= deadline)
            die("warm-up: %d of %d connections got no PONG within %.1f s", waiting, cfg.conns,
                cfg.max_seconds);
        int n = epoll_wait(epfd, evs, 256, (int)((deadline - t) / 1000000) + 1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            buf_reserve(&c->in, 256);
            ssize_t r = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0)
                die("warm-up: connection %d (port %d): %s", c->idx, c->port,
                    r == 0 ? "closed by server" : strerror(errno));
            c->in.len += (size_t)r;
            struct reply rep;
            const char *perr = NULL;
            size_t end;
            int st = resp_parse(c->in.p, c->in.len, 0, &end, &rep, &perr);
            if (st == 0) continue;
            if (st < 0) die("warm-up: connection %d: protocol error: %s", c->idx, perr);
            if (ok[c->idx] || end != c->in.len || rep.type != R_STATUS || rep.len != 4 ||
                memcmp(rep.str, "PONG", 4)) {
                size_t shown = 0; /* the reply's first line, at most 80 bytes */
                while (shown < c->in.len && shown < 80 && c->in.p[shown] != '\r') shown++;
                die("warm-up: connection %d (port %d): expected one +PONG, got '%.*s'", c->idx,
                    c->port, (int)shown, c->in.p);
            }
            ok[c->idx] = 1;
            c->in.len = c->in.off = 0;
            waiting--;
        }
    }
    free(ok);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void report(void) {
    double elapsed = (double)((t_last > t_start ? t_last : t_start) - t_start) / 1e9;
    if (timed_out) elapsed = cfg.max_seconds;
    double rate = elapsed > 0 ? (double)ops / elapsed : 0;
    double p50 = hist_pct(50), p99 = hist_pct(99);
    double mean = hist_count ? lat_sum_us / (double)hist_count : 0;
    int complete = ops >= cfg.requests;

    if (cfg.json) {
        printf("{\"mode\":\"%s\",\"host\":", mode_names[cfg.mode]);
        json_str(cfg.host);
        printf(",\"port\":%d,\"conns\":%d,\"pipeline\":%d,\"requests\":%lld,\"queue\":",
               cfg.port, cfg.conns, cfg.pipeline, cfg.requests);
        json_str(cfg.queue);
        printf(",\"body_size\":%d,\"ops\":%lld,\"replies\":%lld,\"elapsed_s\":%.6f,"
               "\"ops_per_sec\":%.1f,\"lat_us\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%" PRIu64
               ",\"mean\":%.1f},\"errors\":%lld,\"first_error\":",
               cfg.body_size, ops, replies, elapsed, rate, p50, p99, lat_max_us, mean, errors);
        json_str(first_error);
        printf(",\"null_replies\":%lld,\"received\":%lld,\"ack_requests\":%lld,\"acked\":%lld,"
               "\"conn_failures\":%lld,\"drained\":%s,\"timed_out\":%s,\"complete\":%s}\n",
               null_replies, received, ack_requests, acked, conn_failures, drained ? "true" : "false",
               timed_out ? "true" : "false", complete ? "true" : "false");
        return;
    }
    const char *unit = is_consume() ? "jobs" : "ops";
    printf("mode %s  %s:%d", mode_names[cfg.mode], cfg.host, cfg.port);
    for (int i = 1; i < nports; i++) printf(",%d", ports[i]);
    printf("  conns %d  pipeline %d  queue %s\n", cfg.conns, cfg.pipeline, cfg.queue);
    printf("%s: %lld of %lld in %.3f s  =>  %.0f %s/s\n", unit, ops, cfg.requests, elapsed, rate,
           unit);
    printf("latency us: p50 %.0f  p99 %.0f  max %" PRIu64 "  mean %.1f  (%lld replies)\n", p50,
           p99, lat_max_us, mean, replies);
    if (cfg.mode == M_GETACK || is_g1())
        printf("acks: %lld jobs received, %lld acks sent, %lld acked\n", received, ack_requests,
               acked);
    if (null_replies) printf("null replies: %lld\n", null_replies);
    printf("errors: %lld%s%s\n", errors, errors ? "  first: " : "", first_error);
    if (conn_failures) printf("connection failures: %lld\n", conn_failures);
    if (drained && is_g1())
        printf("note: a connection gave up after %d GETJOB replies in a row brought no job "
               "(queue empty, or only errors)\n", cfg.max_empty * cfg.pipeline);
    else if (drained)
        printf("note: gave up after %d batches in a row brought no job "
               "(queue empty, or only errors)\n", cfg.max_empty);
    if (timed_out) printf("note: stopped by --max-seconds %.1f; results are partial\n",
                          cfg.max_seconds);
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1: %s", strerror(errno));
    build_template();
    open_conns();
    warm_up();

    t_start = t_last = now_ns();
    uint64_t deadline = t_start + (uint64_t)(cfg.max_seconds * 1e9);
    for (int i = 0; i < cfg.conns; i++)
        is_g1() ? g1_start(&conns[i]) : next_batch(&conns[i]);

    struct epoll_event evs[256];
    while (live_conns > 0) {
        uint64_t t = now_ns();
        if (t >= deadline) { timed_out = 1; break; }
        int timeout_ms = (int)((deadline - t) / 1000000) + 1;
        int n = epoll_wait(epfd, evs, 256, timeout_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->done) continue;
            if (evs[i].events & (EPOLLERR | EPOLLHUP) && !(evs[i].events & EPOLLIN)) {
                conn_fail(c, "socket error/hangup");
                continue;
            }
            if (evs[i].events & EPOLLOUT) flush_out(c);
            if (!c->done && evs[i].events & EPOLLIN) on_readable(c);
        }
    }
    report();
    return 0;
}
