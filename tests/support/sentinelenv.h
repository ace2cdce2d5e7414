/* Test harness for Redis Sentinel: a master, its replica and three
 * sentinels on loopback (tests/support/sentinel.c). Every process is a
 * child of the test process, started with PR_SET_PDEATHSIG, in a temp dir
 * of its own named as the harness's servers are (so scripts/run-tests.sh
 * finds leftovers), and stopped by pid. */
#ifndef HILOCK_TEST_SENTINELENV_H
#define HILOCK_TEST_SENTINELENV_H

#include "support/harness.h"

#define TEST_SENTINELS 3
#define TEST_SENTINEL_NAME "hlmaster"

typedef struct test_sentinel {
    test_redis node[2];                    /* [0] master at start, [1] its replica */
    test_redis sentinel[TEST_SENTINELS];   /* each in its dir, with its sentinel.conf */
    char name[32];                         /* the master's name: "hlmaster" */
    /* "redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3#hlmaster" */
    char url[256];
} test_sentinel;

/* Start the master (DEBUG enabled), its replica, wait until the replica's
 * link is up, then the three sentinels (quorum 2, down-after 1000 ms,
 * failover-timeout 5000 ms), and wait (at most 15 s) until every sentinel
 * names the master, knows its replica (link ok) and the two other
 * sentinels, so that a failover can be authorised. Returns 0, or -1 (and
 * stops whatever it started). */
int test_sentinel_start(test_sentinel *s);

/* SIGKILL every process of s (by pid) and remove their dirs. Harmless on
 * a zeroed, half-started or already stopped s. */
void test_sentinel_stop(test_sentinel *s);

/* One sentinel that monitors 127.0.0.1:master_port under `name` with
 * `quorum`, on a free port, in a dir of its own (r->dir has sentinel.conf
 * and sentinel.log). Waits until it answers PING. Returns 0 or -1 (nothing
 * left running). Stop it with test_redis_stop(). */
int test_sentinel_spawn(test_redis *r, const char *name, int master_port, int quorum);

/* The data node whose ROLE says master now; NULL if none or several do
 * (after a SENTINEL FAILOVER the old master keeps saying master until the
 * sentinels reconfigure it, about 10 s later). */
test_redis *test_sentinel_master(test_sentinel *s);

/* Sentinel `sent` knows n replicas of `name`, each flagged just "slave"
 * (not down, not disconnected) with its master link ok: one it may
 * promote. */
int test_sentinel_replicas_ok(const test_redis *sent, const char *name, size_t n);

/* 'm' if ROLE says master, 's' if it says slave, 0 if it cannot be asked. */
int test_redis_role(const test_redis *r);

/* The port that sentinel `sent` names for `name` (SENTINEL
 * get-master-addr-by-name), or -1. */
int test_sentinel_named_port(const test_redis *sent, const char *name);

/* SENTINEL FAILOVER <name>, sent to the first live sentinel that takes it.
 * Returns 0, or -1 (the errors are printed). Redis 7.0's Sentinel only
 * promotes the replica (REPLICAOF NO ONE): the old master keeps taking
 * writes, which are lost, until clients hear +switch-master (about 1 s
 * later), and is made a replica only about 10 s later. */
int test_sentinel_failover(test_sentinel *s);

/* The failover an operator makes without losing writes: CLIENT PAUSE
 * pause_ms WRITE on the master, wait (at most 2 s) until the replica has
 * every byte of it, then SENTINEL FAILOVER. Clients that follow
 * +switch-master (about 1.2 s later) send their paused requests again to the
 * new master; whatever is still paused on the old master when the pause
 * ends runs there, where nobody reads it any more. Returns 0 or -1. */
int test_sentinel_failover_paused(test_sentinel *s, int pause_ms);

/* Wait (at most timeout_ms) until a majority of the live sentinels name a
 * data node other than `old` and that node's ROLE says master. Returns it,
 * or NULL. */
test_redis *test_sentinel_wait_new_master(test_sentinel *s, const test_redis *old, int timeout_ms);

/* Start a data node again that was killed (test_redis_kill, or a pid no
 * longer running), on its port, as a replica of `master` (NULL: the node
 * whose ROLE says master), and wait (at
 * most 10 s) until its link is up: the pair is whole again. Returns 0 or
 * -1. */
int test_sentinel_node_restart(test_sentinel *s, test_redis *r, const test_redis *master);

/* Start a sentinel again that was killed with test_redis_kill (its dir
 * kept): on its port, from its sentinel.conf, which holds what it had
 * learned (the master, the replicas, the other sentinels, the epoch).
 * Waits until it answers PING. Returns 0, or -1 (nothing left running). */
int test_sentinel_respawn(test_redis *r);

#endif
