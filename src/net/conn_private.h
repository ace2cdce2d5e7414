/* Between req.c and conn.c only. */
#ifndef HILOCK_CONN_PRIVATE_H
#define HILOCK_CONN_PRIVATE_H
#include "net/net.h"
void hl_conn_send(hl_conn *k, hl_req *r);
void hl_req_again(hl_req *r);
void hl_req_finish(hl_req *r, redisReply *reply, int err);
void hl_req_on_reply(redisAsyncContext *ac, void *reply, void *privdata);
#endif
