/* Subscriber connections, read by hilock itself.
 *
 * hiredis's async API cannot carry sharded pub/sub: no release knows
 * SSUBSCRIBE, and 0.14.1 asserts on a reply it did not expect (an
 * smessage, or the sunsubscribe a server pushes when a slot moves away).
 * So a subscriber connection is a non-blocking redisContext (the socket,
 * its output buffer and hiredis's reply reader) whose socket the event loop
 * watches (hilock_loop.io_*). Every reply after the handshake is routed by
 * what it says (its kind and channel), never by the order of commands, so
 * classic and sharded subscriptions, acknowledgements, messages and the
 * server's own unsubscribes all take one path: ev.push. */
#include <errno.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include "net/net.h"
#include "net/conn_private.h"

static void sub_io(void *arg, int events);

static void sub_watch(hl_conn *k) {
    int ev = HILOCK_IO_READ;
    if (k->tls_want) { /* the TLS handshake waits for one of them */
        k->net->loop->ev.io_watch(k->io, k->tls_want);
        return;
    }
    if (k->state == HL_CONN_CONNECTING || k->wpending) ev |= HILOCK_IO_WRITE;
    k->net->loop->ev.io_watch(k->io, ev);
}

void hl_sub_close(hl_conn *k) {
    if (k->rc == NULL) return;
    k->net->loop->ev.io_free(k->io); /* before the socket closes */
    k->ssl = NULL; /* redisFree frees it */
    k->tls_want = 0;
    redisFree(k->rc);
    k->rc = NULL;
    k->io = NULL;
    k->wpending = 0;
    k->gen++;
}

/* The connection failed or broke: close it, and tell the owner (who
 * resubscribes when it is back). Only from the loop's io callback or a
 * timer, never from inside a call of the owner's. */
static void sub_drop(hl_conn *k, int err, const char *why) {
    hl_set_error(k->net->loop, "%s: %s", k->state == HL_CONN_CONNECTING ? "connect" : "connection lost",
                 why && *why ? why : "closed");
    snprintf(k->why, sizeof(k->why), "%s", why && *why ? why : "closed");
    k->last_err = err;
    hl_sub_close(k);
    hl_conn_down(k);
}

/* Queue a command; it is written when the socket is writable. */
static void sub_append(hl_conn *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisvAppendCommand(k->rc, fmt, ap);
    va_end(ap);
    k->wpending = 1;
    sub_watch(k);
}

/* A failure whose reason is in errstr already (TLS's). */
static void sub_fail(hl_conn *k, int err) {
    k->last_err = err;
    hl_sub_close(k);
    hl_conn_down(k);
}

/* Connected (and through TLS, if any): AUTH, or ready at once; under TLS
 * a HELLO 2 at least, because TLS 1.3 ends the client's handshake before
 * the server has checked our certificate: its first answer says it took
 * it, and a refusal is then ETLS (sub_broke), not a lost ready connection.
 * HELLO, as AUTH, passes any ACL (PING may be refused), and every server
 * with TLS (6.0 on) knows it. */
static void sub_greet(hl_conn *k) {
    const hl_url *u = &k->net->url;
    int auth = u->pass != NULL && !k->bare;
    /* Until a server said whether pub/sub is sharded (the first INFO to
     * answer, a command connection's or this one's), a subscription would
     * go out classic, and stay so on a node that also serves its slot in
     * sharded mode, deaf to SPUBLISH: ask here too, before the first. */
    int info = !k->bare && !k->net->sharded_known;
    k->handshake_left = 0;
    k->sub_info = 0;
    if (!auth && k->ssl == NULL && !info) {
        sub_watch(k);
        hl_conn_ready(k);
        return;
    }
    if (auth && u->user) sub_append(k, "AUTH %s %s", u->user, u->pass);
    else if (auth) sub_append(k, "AUTH %s", u->pass);
    else if (k->ssl != NULL) sub_append(k, "HELLO 2");
    k->handshake_left = auth || k->ssl != NULL;
    if (info) {
        sub_append(k, "INFO");
        k->handshake_left++;
        k->sub_info = 1;
    }
}

/* One step of the TLS handshake, which sub.c drives itself: hiredis's
 * redisContext would drive it only from its reads and writes, and with
 * nothing to write (no AUTH) a refused certificate would show only at the
 * first SUBSCRIBE. hiredis has the SSL already (attaching it later would
 * restart the handshake), so that its reads and writes go through TLS once
 * this is done; then on to sub_greet. */
static void sub_tls_step(hl_conn *k) {
    int want = 0;
    int r = hl_tls_step(k, &want);
    if (r == 0) {
        k->tls_want = want;
        sub_watch(k);
        return;
    }
    k->tls_want = 0;
    if (r < 0) {
        sub_fail(k, r == HL_TLS_LOST ? HILOCK_ECONN : HILOCK_ETLS);
        return;
    }
    sub_watch(k);
    sub_greet(k);
}

static void sub_connected(hl_conn *k) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(k->rc->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
        sub_drop(k, HILOCK_ECONN, strerror(err));
        return;
    }
    k->state = HL_CONN_HANDSHAKE;
    if (k->net->tls != NULL && k->addr->host != NULL) {
        int rc = hl_tls_begin(k, k->rc);
        if (rc != 0) {
            sub_fail(k, rc == HL_TLS_LOST ? HILOCK_ECONN : HILOCK_ETLS);
            return;
        }
        sub_tls_step(k);
        return;
    }
    sub_greet(k);
}

/* One reply: the handshake's, or a push for the owner. */
static void sub_dispatch(hl_conn *k, const redisReply *r) {
    if (k->state == HL_CONN_HANDSHAKE) {
        if (k->sub_info && k->handshake_left == 1) { /* the INFO, last: refused is classic */
            k->sub_info = 0;
            k->handshake_left = 0;
            hl_net_pubsub_decide(k->net, r);
            hl_conn_ready(k);
        } else if (r->type == REDIS_REPLY_ERROR) {
            hl_reply_error(k->net->loop, r);
            sub_drop(k, HILOCK_EAUTH, r->str);
        } else if (--k->handshake_left == 0) {
            hl_conn_ready(k);
        }
        return;
    }
    if (k->ev.push == NULL || k->net->loop->freeing || hl_sub_is_pong(r)) return;
    if (r->type == REDIS_REPLY_ERROR) {
        k->ev.push(k->ev.arg, "error", r->str, r->len, NULL, 0);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) return;
    const redisReply *kind = r->element[0], *ch = r->element[1];
    const redisReply *data = r->elements > 2 ? r->element[2] : NULL;
    if (kind->type != REDIS_REPLY_STRING || ch->type != REDIS_REPLY_STRING) return;
    if (data && data->type != REDIS_REPLY_STRING) data = NULL;
    k->ev.push(k->ev.arg, kind->str, ch->str, ch->len, data ? data->str : NULL, data ? data->len : 0);
}

/* A read or write failed: before the connection was ready, TLS may be why
 * (e.g. our certificate refused: the server's alert, or its reset). */
static void sub_broke(hl_conn *k) {
    if (hl_conn_tls_refused(k)) sub_fail(k, HILOCK_ETLS);
    else sub_drop(k, HILOCK_ECONN, k->rc->errstr);
}

static void sub_read(hl_conn *k) {
    redisContext *rc = k->rc;
    unsigned gen = k->gen;
    if (redisBufferRead(rc) != REDIS_OK) {
        sub_broke(k);
        return;
    }
    hl_conn_heard(k);
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(rc->reader, &reply) != REDIS_OK) {
            sub_drop(k, HILOCK_EPROTO, rc->reader->errstr);
            return;
        }
        if (reply == NULL) return;
        sub_dispatch(k, reply);
        freeReplyObject(reply);
        if (k->gen != gen) return; /* a handler closed it */
    }
}

static void sub_io(void *arg, int events) {
    hl_conn *k = arg;
    unsigned gen = k->gen;
    if (k->tls_want) {
        sub_tls_step(k);
        if (k->gen != gen || k->tls_want || !k->wpending) return;
        events |= HILOCK_IO_WRITE;
    } else if (k->state == HL_CONN_CONNECTING) {
        sub_connected(k);
        if (k->gen != gen || k->tls_want || !k->wpending) return;
        events |= HILOCK_IO_WRITE;
    }
    if ((events & HILOCK_IO_WRITE) && k->wpending) {
        int done = 0;
        if (redisBufferWrite(k->rc, &done) != REDIS_OK) {
            sub_broke(k);
            return;
        }
        k->wpending = !done;
        sub_watch(k);
    }
    if (events & HILOCK_IO_READ) sub_read(k);
}

void hl_sub_connect(hl_conn *k) {
    hl_loop *l = k->net->loop;
    const hl_addr *a = k->addr;
    redisContext *rc = a->path ? redisConnectUnixNonBlock(a->path)
                               : redisConnectNonBlock(a->host, a->port);
    if (rc == NULL || rc->err) {
        char why[160];
        snprintf(why, sizeof(why), "connect: %s", rc ? rc->errstr : "out of memory");
        if (rc) redisFree(rc);
        hl_conn_open_failed(k, HILOCK_ECONN, why);
        return;
    }
    k->io = l->ev.io_new(l->ev.data, rc->fd, sub_io, k);
    if (k->io == NULL) {
        redisFree(rc);
        hl_conn_open_failed(k, HILOCK_ELOOP, "event loop adapter refused the connection");
        return;
    }
    k->rc = rc;
    k->state = HL_CONN_CONNECTING;
    sub_watch(k);
    hl_timer_start(l, &k->connect_to, k->net->connect_timeout_ms);
}

void hl_sub_ping(hl_conn *k) { sub_append(k, "PING"); }

int hl_sub_is_pong(const redisReply *r) {
    if (r->type == REDIS_REPLY_STATUS) return 1; /* +PONG, subscribed to nothing */
    if (r->type == REDIS_REPLY_ERROR) /* NOPERM ... 'ping', unknown command 'PING' */
        return strcasestr(r->str, "'ping'") != NULL;
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(r->element[0]->str, "pong") == 0;
}

void hl_conn_subscribe(hl_conn *k, const char *ch, size_t len, int on) {
    static const char *const cmd[2][2] = {{"UNSUBSCRIBE %b", "SUBSCRIBE %b"},
                                          {"SUNSUBSCRIBE %b", "SSUBSCRIBE %b"}};
    if (k->state != HL_CONN_READY) return; /* the owner resubscribes on ready */
    sub_append(k, cmd[k->net->sharded && !k->bare][on != 0], ch, len);
}
