/* Test harness: real redis-server processes on free loopback ports, a sync
 * hiredis connection to inspect them, and helpers to drive a libevent loop.
 * Servers are started with PR_SET_PDEATHSIG so they die with the test process
 * even when a test crashes. */
#ifndef HILOCK_TEST_HARNESS_H
#define HILOCK_TEST_HARNESS_H

#include <sys/types.h>
#include <hiredis/hiredis.h>

struct event_base; /* libevent's; declared here so libev users can include this */

typedef struct test_redis {
    pid_t pid;
    int port;
    char url[64];      /* "redis://127.0.0.1:PORT" */
    char dir[128];     /* a temporary working dir, removed by stop */
} test_redis;

/* The server's programs: redis-server and redis-cli, or valkey-server and
 * valkey-cli when HILOCK_SERVER is "valkey" (`make test SERVER=valkey`);
 * HILOCK_REDIS_SERVER, if set, is the server's path. Sentinels run as the
 * server with --sentinel. */
const char *test_server_bin(void);
const char *test_cli_bin(void);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int test_free_port(void);

/* A TCP port on 127.0.0.1 where connections are refused (bound, never
 * listening) for the rest of the process: "a server that is down", which
 * no server started meanwhile can take. */
int test_refused_port(void);

/* Start redis-server on a free port (or `port` if > 0) with no persistence,
 * plus the extra argv pairs (NULL-terminated, e.g. "--requirepass", "pw",
 * NULL). Waits until it answers PING (up to 5 s). Returns 0 or -1. */
int test_redis_start(test_redis *r, int port, ...);

/* The same with the DEBUG command enabled (off by default from Redis 7 on;
 * older servers lack the option and allow it anyway). */
int test_redis_start_debuggable(test_redis *r, int port);

/* Stall the server: DEBUG SLEEP `secs` from a child process (so the caller's
 * loop keeps running). Returns the child's pid; it exits 0 when the server
 * answered OK. */
pid_t test_redis_debug_sleep(const test_redis *r, const char *secs);

/* A socket listening on a free loopback port that never answers (the
 * kernel accepts connections; nobody reads). Returns the fd; the port in
 * *port. */
int test_listen_silent(int *port);

/* A Redis Cluster of 3 masters and 3 replicas on loopback. */
#define TEST_CLUSTER_NODES 6
/* Options a test adds to each server it starts (TLS's, say): writes at
 * most max strings into argv for the server on `port`, returns how many.
 * The strings must stay valid until the next call. */
typedef int (*test_node_args)(int port, const char **argv, int max, void *data);

typedef struct test_cluster {
    test_redis node[TEST_CLUSTER_NODES];
    char url[64];      /* "redis://127.0.0.1:PORT" of the first node */
    test_node_args args; /* NULL, or what every node gets besides (restarts too) */
    void *args_data;
} test_cluster;

/* Start the six servers (cluster mode, DEBUG enabled), join them with
 * `redis-cli --cluster create --cluster-replicas 1`, and wait until every
 * node says cluster_state:ok. Returns 0, or -1 (and stops what started). */
int test_cluster_start(test_cluster *cl);
/* The same, with args's options on every node (kept for restarts). */
int test_cluster_start_with(test_cluster *cl, test_node_args args, void *data);
void test_cluster_stop(test_cluster *cl);
/* The node that is master of `slot` now (by CLUSTER SLOTS), or NULL. */
test_redis *test_cluster_master_of(test_cluster *cl, unsigned slot);

/* A new temporary dir, named as the servers' are (scripts/run-tests.sh
 * finds leftovers by it), into out. Returns 0 or -1. */
int test_make_dir(char *out, size_t n);

/* Remove a dir test_make_dir made, with everything in it. */
void test_remove_dir(const char *dir);

/* Is the server r->pid (a child of ours) up on r->port? 1: it answers
 * PING; 0: not yet; -1: it exited; -2: another process answers there. */
int test_redis_probe(const test_redis *r);

/* SIGKILL the server if it is running and wait for it; remove its dir. */
void test_redis_stop(test_redis *r);

/* A program of the build: $ENV if that is set (env may be NULL), else
 * `rel` beside this test binary (e.g. "hilock", "examples/metrics"), in
 * out (n bytes). Returns out, or NULL if this binary's path is unknown. */
const char *test_build_path(const char *env, const char *rel, char *out, size_t n);

/* A file of the source tree: `rel` (e.g. "man/hilock.1") in the nearest
 * directory above this test binary that has it (the build dir lies inside
 * the tree), in out (n bytes). Returns out, or NULL if there is none. */
const char *test_src_path(const char *rel, char *out, size_t n);

/* A new sync connection to the server (caller frees), or NULL. */
redisContext *test_redis_connect(const test_redis *r);

/* One command on a fresh connection: its reply (caller frees), or NULL
 * when the server is not running (pid 0) or cannot be reached. */
redisReply *test_redis_cmd(const test_redis *r, const char *fmt, ...);

/* Does r's reply to `cmd` (a command without arguments whose reply is a
 * bulk string, as INFO and CLUSTER INFO give) contain every needle of the
 * NULL-terminated list? */
int test_redis_says(const test_redis *r, const char *cmd, ...);

/* Run one command on a fresh connection and return its integer reply
 * (or -1 on error / non-integer). Handy for EXISTS, PTTL, PUBSUB NUMSUB. */
long long test_redis_int(const test_redis *r, const char *fmt, ...);

/* The number `name` of r's INFO replication (master_repl_offset,
 * slave_repl_offset, ...), or -1. */
long long test_redis_repl_num(const test_redis *r, const char *name);

/* Wait (at most timeout_ms) until replica r has applied every byte of
 * master m's replication stream (its slave_repl_offset reached m's
 * master_repl_offset). Returns 1, or 0 (the offsets are printed). Meant
 * while m's writes are paused: otherwise m may move on meanwhile. */
int test_redis_caught_up(const test_redis *m, const test_redis *r, int timeout_ms);

/* Run the loop until *flag != 0 or timeout_ms passes. Returns 1 when the
 * flag was set, 0 on timeout. */
int test_loop_until(struct event_base *base, volatile int *flag, int timeout_ms);

/* Run the loop for ms milliseconds. */
void test_loop_for(struct event_base *base, int ms);

/* Monotonic milliseconds. */
long long test_now_ms(void);

/* Sleep ms milliseconds (through signals). */
void test_msleep(int ms);

/* The file's content (at most n-1 bytes) into buf, "" if it cannot be read. */
char *test_slurp(const char *path, char *buf, size_t n);

/* The whole file, NUL-terminated, to free(); NULL if it cannot be read
 * (or no memory). */
char *test_slurp_all(const char *path);

/* Start argv (argv[0] searched in PATH) with stdin from /dev/null, stdout
 * into the file `out` and stderr into `err` (NULL: into `out`), with the
 * "K=V" entries of env (may be NULL) added. It dies with the test process.
 * Returns its pid, or -1. */
pid_t test_spawn(char *const argv[], char *const env[], const char *out, const char *err);

/* fork + exec a server: argv[0] searched in PATH, stdin from /dev/null,
 * stdout and stderr into `outfile`, in `dir` (NULL: here); it dies with
 * the test process. The pid, or -1. */
pid_t test_spawn_server(const char *const *argv, const char *outfile, const char *dir);

/* The same for a server with children of its own (nginx's master): it
 * gets SIGTERM when the test process dies, so that it can stop them, and
 * the "K=V" entries of env (may be NULL) are added to its environment. */
pid_t test_spawn_master(const char *const *argv, char *const env[], const char *outfile,
                        const char *dir);

/* Its exit status (128+N if signal N killed it), or -1 if it is still
 * running after ms (it is left running: kill it, or wait again). */
int test_wait(pid_t pid, int ms);

/* ---- Restarting a cluster node (hilock-stress) ---------------------------- */

/* SIGKILL the server if it is running and wait for it, like test_redis_stop,
 * but keep its dir (a cluster node's nodes.conf) for a restart. */
void test_redis_kill(test_redis *r);

/* Start node i of the cluster again after test_redis_kill, on its port, in
 * its dir, with the options test_cluster_start gave it: it reads its
 * nodes.conf and rejoins the cluster (as a replica when its slots went to
 * its promoted replica meanwhile). Waits until it answers PING. Returns 0,
 * or -1 (nothing left running; its dir stays for test_cluster_stop). */
int test_cluster_node_restart(test_cluster *cl, int i);

#endif
