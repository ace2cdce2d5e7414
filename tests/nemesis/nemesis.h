/* hilock-nemesis, shared between its parts: the network of namespaces
 * (netns.c), the Redis servers in them (servers.c), the fenced resource
 * (resource.c), the delaying proxy (proxy.c), the client processes
 * (worker.c), the faults and the
 * matrix of cases (cases.c), the checks of the histories (check.c) and the
 * report (report.c); main.c runs the cases. */
#ifndef HILOCK_NEMESIS_H
#define HILOCK_NEMESIS_H

#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#define NEM_MAX_HOSTS 24
#define NEM_MAX_PROCS 8
#define NEM_MAX_SERVERS 9
#define NEM_ANY (-1)          /* a promise that is not made */
#define NEM_SENTINELS 3
#define NEM_REDIS_PORT 6379
#define NEM_SENTINEL_PORT 26379
#define NEM_RESOURCE_PORT 7100
#define NEM_MASTER_NAME "nem"
#define NEM_LOCK "nemesis"    /* the one lock name every case uses */

/* ---- Hosts and the network (netns.c) ------------------------------------ */

/* One host: a network namespace with one veth (eth0) to the bridge. */
typedef struct nem_host {
    char name[8];   /* "r1", "c2", "s1", "res" */
    char ns[32];    /* "hln<runid>-<name>" */
    char ip[20];
    int cut;        /* iptables rules were added here (heal flushes them) */
} nem_host;

typedef struct nem_net {
    char prefix[16];   /* "hln<runid>-" */
    int subnet;        /* the y of 10.77.y.0/24 */
    char br[32];       /* the bridge's namespace */
    nem_host host[NEM_MAX_HOSTS];
    int nhosts;
    int up;
} nem_net;

/* Run argv (PATH searched), output into the run's log; its exit status,
 * or -1. */
int nem_exec(const char *const *argv);
/* The same for a command line split at spaces (no quoting). */
int nem_execf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nem_log_to(const char *path);   /* where nem_run's output goes */

int nem_net_init(nem_net *n, const char *runid, int subnet);
/* Add a host (its namespace, veth, address 10.77.subnet.octet). */
nem_host *nem_net_add(nem_net *n, const char *name, int octet);
nem_host *nem_net_host(nem_net *n, const char *name);
/* Delete every namespace of the run (processes in them must be gone). */
void nem_net_down(nem_net *n);
/* Delete every namespace whose name starts with prefix. */
void nem_net_sweep(const char *prefix);
/* Move the calling process into h's namespace: 0 or -1. */
int nem_enter(const char *ns);
/* fork(): the parent gets the child's pid (or -1); the child, killed with
 * the controller and with SIGTERM's default action, runs on in namespace
 * `ns` (NULL: the controller's) (0) or exits if it cannot enter it. */
pid_t nem_fork_into(const char *ns);
/* iptables RULE... in h's namespace (the filter table). */
int nem_ipt(nem_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush the rules of every host that has some. */
void nem_heal_net(nem_net *n);

/* ---- Servers (servers.c) -------------------------------------------------- */

enum { SRV_DATA, SRV_SENTINEL };

typedef struct nem_server {
    nem_host *host;
    int port;
    int kind;            /* SRV_DATA, SRV_SENTINEL */
    int skew;            /* runs with libskewclock.so */
    pid_t pid;
    int stopped;         /* SIGSTOPped */
    char dir[200];       /* its working dir (logs, unix socket, clock file) */
    char sock[220];      /* the unix socket the controller uses */
    char clock[220];     /* the skew clock's control file */
    char extra[512];     /* options given at start, kept for a restart */
} nem_server;

/* Start a server in its host's namespace; 0, or -1 (logs kept). */
int nem_server_start(nem_server *s);
void nem_server_kill(nem_server *s);              /* SIGKILL, wait */
int nem_server_restart(nem_server *s);            /* empty, same options */
/* A command over the server's unix socket (never through a fault); the
 * reply (caller frees) or NULL. */
redisReply *nem_cmd(const nem_server *s, const char *fmt, ...);
int nem_cmd_ok(const nem_server *s, const char *fmt, ...);
/* Fork a recorder of every command the server runs (MONITOR over its unix
 * socket), one line each into path, prefixed with the CLOCK_MONOTONIC
 * time it was read (the line itself has the server's wall clock, client
 * address and port); its pid, or -1. Stopped by SIGKILL. */
pid_t nem_monitor_start(const nem_server *s, const char *path);
/* The server's wall clock: rate in ppm and total step in ms. */
int nem_clock_set(nem_server *s, long ppm, long long offset_ms);

/* ---- Workloads and workers (worker.c) --------------------------------------- */

enum { PRIM_MUTEX, PRIM_SEM, PRIM_FAIR, PRIM_RW };

/* What a client process does, over and over: think, acquire (waiting
 * wait_ms; 0 tries once), hold (doing read-modify-writes on the resource),
 * release. */
typedef struct nem_role {
    int slots;                 /* concurrent acquire loops in the process */
    int64_t wait_ms;
    int hold_min, hold_max;    /* ms */
    int think_min, think_max;  /* ms */
    int reader;                /* PRIM_RW: takes the read lock (reads only) */
} nem_role;

typedef struct nem_workload {
    int prim;
    int permits;               /* PRIM_SEM: permits_total (1 each) */
    uint32_t lease_ms;
    int fenced;                /* 1: the resource checks fences; 0: no fences */
    int rmw;                   /* holds do read-modify-writes on the resource */
    int starve_never;          /* hilock_config.starve_ms = HILOCK_STARVE_NEVER */
    int nprocs;
    nem_role role[NEM_MAX_PROCS];
} nem_workload;

/* A link of the proxy (proxy.c): what it does to the bytes it relays now. */
typedef struct nem_link {
    volatile int delay_ms, jitter_ms;  /* each chunk: delay +- jitter */
    volatile int chunk_max;            /* bytes; 0: as read */
} nem_link;

/* What the workers tell the controller as they go (a shared mapping). */
typedef struct nem_shared {
    nem_link link[1];                  /* set by the controller */
    volatile int holding[NEM_MAX_PROCS];   /* holds believed now */
    volatile int waiting[NEM_MAX_PROCS];   /* acquires pending now */
    volatile long long grants[NEM_MAX_PROCS];
    volatile int subscribed[NEM_MAX_PROCS]; /* waiters have heard a subscription ack */
} nem_shared;

extern nem_shared *nem_sh;

typedef struct nem_worker_args {
    int proc;
    const nem_workload *wl;
    const char *ns;            /* its namespace */
    char url[512];
    char resource[32];         /* "IP:PORT" of the fenced resource */
    char history[256];         /* its history file */
    char log[256];             /* hilock's log lines */
} nem_worker_args;

/* Fork a worker; its pid, or -1. It runs until SIGTERM, then releases
 * what it holds, closes its client and exits. */
pid_t nem_worker_start(const nem_worker_args *a);

/* ---- The fenced resource (resource.c) ------------------------------------- */

typedef struct nem_resource_stats {
    long long counter, accepted, stale_reads, stale_writes, last_fence;
} nem_resource_stats;

/* Fork the resource server in namespace ns, on ip:port (TCP, for the
 * workers) and on the unix socket sock (for the controller). */
pid_t nem_resource_start(const char *ns, const char *ip, int port, const char *sock);
int nem_resource_stats_get(const char *sock, nem_resource_stats *st);

/* ---- The proxy (proxy.c) ------------------------------------------------------ */

/* Fork the proxy in namespace ns, on ip:port, relaying to to_ip:to_port as
 * nem_sh->link[link] says. */
pid_t nem_proxy_start(const char *ns, const char *ip, int port, const char *to_ip, int to_port, int link);

/* ---- Time ------------------------------------------------------------------ */

int64_t nem_now_ns(void);     /* CLOCK_MONOTONIC: one timeline for all */
/* Sleep ms, returning early (1) when the run is interrupted. */
int nem_sleep(int ms);
extern volatile int nem_interrupted;

/* ---- Histories and checks (check.c) ------------------------------------------ */

/* The promise of a cell: what hilock says it does under that fault. */
typedef struct nem_promise {
    int overlap_ms;     /* the largest believed overlap of two holders (mutex);
                           NEM_ANY: mutual exclusion is not promised */
    int lost_updates;   /* lost updates allowed at the resource; NEM_ANY */
    int handoff_ms;     /* a wait pending at a release is served within this,
                           not counting the holds of newcomers that won the
                           race meanwhile (the time the lock lay free); NEM_ANY */
    int recovery_ms;    /* after the heal, the victim is granted within this */
    int wait_slack_ms;  /* every wait ends by its wait_ms plus this */
    int ride_through;   /* no wait fails with a connection error while it has
                           time left */
    int min_share_pct;  /* the share of tl.share_proc during the fault, in %
                           of an equal share, at least; 0 not promised */
    int idle_ms;        /* from a release, while a wait of a running process
                           is pending, to the next grant to anyone; NEM_ANY */
} nem_promise;

typedef struct nem_result {
    long ops, grants, timeouts, errors, busy;
    long overlaps;               /* pairs of holders that overlapped */
    double max_overlap_ms;
    long fence_regressions;
    long over_permits;           /* PRIM_SEM: more holders than permits */
    int max_holders;
    long stranded;               /* waits that never ended */
    long late_waits;             /* ended after wait_ms + slack */
    double max_wait_over_ms;     /* the most a wait ended past its wait_ms */
    long early_fails;            /* connection errors with time left */
    long acked, stale_refused, lost_updates, accepted, counter;
    double max_gap_ms;           /* longest time with no grant */
    double recovery_ms;          /* heal to the victim's first grant; -1 none */
    double max_handoff_ms;       /* release to the next grant, with a wait pending */
    long handoffs;
    double max_idle_ms;          /* release to the next grant to anyone, with a
                                    wait of a running process pending */
    double max_handoff_free_ms;  /* the handoff less the holds within it */
    long lost_holds;             /* lost callbacks */
    long order_violations;       /* fair lock: grants past an earlier wait */
    double max_order_ms;         /* how much earlier that wait came */
    long repl_overlaps;          /* overlaps in the replication window */
    long proc_grants[NEM_MAX_PROCS];
    double share;                /* the slow client's share of the grants
                                    (its grants * processes / all); -1 none */
    int broken;                  /* a promise is broken */
    char why[512];               /* which, in words */
    long code_count[32];         /* errors by code (-code) */
    char codes[256];             /* errors by code, in words */
} nem_result;

/* Fold run x of a repeated cell into acc (the worst figures of the runs);
 * first: acc is empty. */
void nem_result_worst(nem_result *acc, const nem_result *x, int run, int first);
/* acc->codes from acc->code_count. */
void nem_result_codes(nem_result *acc);

/* What the controller did and when, for the checks. */
typedef struct nem_timeline {
    int64_t start_ns, fault_ns, heal_ns, end_ns;
    int victim;                  /* the process the fault aimed at, or -1 */
    int victim_cut;              /* the fault cuts the victim off: its waits
                                    cannot be served until the heal */
    int64_t stop_from[NEM_MAX_PROCS], stop_until[NEM_MAX_PROCS]; /* SIGSTOP */
    int64_t repl_from, repl_until; /* overlaps that begin then are asynchronous
                                      replication's limit (kill -9 of a master) */
    int share_proc;              /* the process whose share of the grants in
                                    the fault is measured, or -1 */
} nem_timeline;

/* Read the workers' histories (dir/h<proc>.log) and check them. */
void nem_check(const char *dir, const nem_workload *wl, const nem_timeline *tl,
               const nem_resource_stats *rs, const nem_promise *p, nem_result *out);

/* ---- Cases (cases.c) -------------------------------------------------------- */

enum { TOPO_STANDALONE, TOPO_SENTINEL, TOPO_REDLOCK, TOPO_CLUSTER, NTOPOS };

typedef struct nem_run nem_run;

typedef struct nem_case {
    const char *id;            /* "sa-mutex-partition-holder" */
    int topo;
    const char *fault;         /* the table's words for the fault */
    int in_short;              /* in NEMESIS=short */
    const nem_workload *wl;
    void (*nemesis)(nem_run *r);
    int fault_ms;              /* how long the fault lasts */
    int settle_ms;             /* run on after the heal */
    long arg;                  /* the fault's parameter (ppm, ms, percent) */
    int clock;                 /* servers run with the skew clock */
    nem_promise promise;
    const char *promise_text;
    int proxy;                 /* PROXY_ALL: every client reaches the master
                                  through the proxy; PROXY_ONE: process 0 only */
} nem_case;

enum { PROXY_NONE, PROXY_ALL, PROXY_ONE };

extern const nem_case nem_cases[];
extern const int nem_ncases;
extern const char *const nem_topo_name[NTOPOS];

/* A case being run (main.c): what a nemesis function acts on. */
struct nem_run {
    const nem_case *c;
    nem_net net;
    nem_server srv[NEM_MAX_SERVERS + NEM_SENTINELS];
    int nsrv;                  /* data servers, then sentinels */
    int ndata;
    int master;                /* index of the master (standalone: 0) */
    nem_host *client[NEM_MAX_PROCS];
    nem_host *res_host;
    pid_t worker[NEM_MAX_PROCS];
    pid_t resource;
    pid_t proxy;
    pid_t monitor;             /* -M: the master's MONITOR recorder */
    nem_host *px_host;
    nem_timeline tl;
    char dir[160];
    char res_sock[200];
};

/* The topology's servers in their namespaces (topo.c); the clients' URL
 * into url. 0 or -1. */
int nem_topo_setup(nem_run *r, int topo, int skew, char *url, size_t n);
int nem_sentinel_master(nem_run *r);  /* the data server named master, or -1 */
int nem_cluster_master(nem_run *r);   /* the master of the lock's slot, or -1 */

/* Fault actions (cases.c), for nemesis functions. */
int nem_wait_holder(nem_run *r, int proc, int ms);
int nem_wait_waiter(nem_run *r, int proc, int ms);
void nem_fault_begin(nem_run *r, int victim);
/* A line of the controller's own log (events.log of the case). */
void nem_event(nem_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nem_heal(nem_run *r);

/* ---- Report (report.c) -------------------------------------------------------- */

typedef struct nem_cell {
    const nem_case *c;
    nem_result res;            /* the worst figures over its runs */
    int ran;                   /* runs that were set up (0: none) */
    int broken_runs;           /* runs that broke a promise */
    char note[160];
    double secs;               /* all its runs */
} nem_cell;

void nem_report_json(const char *path, const nem_cell *cells, int n, const char *matrix);
void nem_report_markdown(FILE *f, const nem_cell *cells, int n, const char *matrix);
/* The figures that only some cells have (the slow client's share, the
 * fair lock's order, overlaps in the replication window, the idle lock
 * behind a stopped waiter), in words; "" when none. */
void nem_result_more(const nem_case *c, const nem_result *x, char *out, size_t n);
/* Replace what lies between the markers of docs/RELIABILITY.md. */
int nem_report_doc(const char *path, const nem_cell *cells, int n, const char *matrix);

#endif
