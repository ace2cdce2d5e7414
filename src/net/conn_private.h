/* Between req.c and conn.c only. */
#ifndef HILOCK_CONN_PRIVATE_H
#define HILOCK_CONN_PRIVATE_H
#include "net/net.h"
void hl_conn_send(hl_conn *k, hl_req *r);
void hl_req_again(hl_req *r);
void hl_req_finish(hl_req *r, redisReply *reply, int err);
void hl_req_on_reply(redisAsyncContext *ac, void *reply, void *privdata);
void hl_req_on_stash(redisAsyncContext *ac, void *reply, void *privdata);
void hl_req_on_wait(redisAsyncContext *ac, void *reply, void *privdata);
/* The life cycle shared by both kinds of connection (conn.c). */
void hl_conn_ready(hl_conn *k);
void hl_conn_down(hl_conn *k);
void hl_conn_retry_later(hl_conn *k);
void hl_conn_open_failed(hl_conn *k, int err, const char *why);
/* Subscriber connections (sub.c). */
void hl_sub_connect(hl_conn *k);
void hl_sub_close(hl_conn *k);
void hl_sub_ping(hl_conn *k);
#endif
