/* A TCP relay in a child process, between clients and one server on
 * loopback, that can blackhole a connection: stop carrying it either way
 * while keeping both of its sockets open. What a NAT or a firewall that
 * forgets a flow does, or a partition that sends no RST and no FIN: the
 * client's writes are accepted by its kernel and never answered, and
 * nothing tells it so. */
#ifndef HILOCK_TEST_BLACKHOLE_H
#define HILOCK_TEST_BLACKHOLE_H

#include <sys/types.h>

typedef struct test_blackhole {
    pid_t pid;
    int port;     /* where clients connect (127.0.0.1) */
    int ctl;      /* write end of the child's control pipe */
    int ctl_ack;  /* read end of its acknowledgements */
    char url[64]; /* "redis://127.0.0.1:PORT" */
} test_blackhole;

/* Relay 127.0.0.1:b->port to 127.0.0.1:target. 0 or -1. */
int test_blackhole_start(test_blackhole *b, int target);

/* Blackhole the relayed connection whose server side has local port
 * `upstream_port` (as the server's CLIENT LIST shows it in addr=), or every
 * connection relayed so far when it is 0. Returns once the relay has done
 * it. */
void test_blackhole_drop(test_blackhole *b, int upstream_port);

/* Stop the relay (by pid); every connection through it closes. */
void test_blackhole_stop(test_blackhole *b);

#endif
