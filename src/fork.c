/* fork(): a client belongs to the process that made it.
 *
 * A server that makes a client and then forks workers (nginx's model) hands
 * every worker a copy of the client with the parent's sockets. Were a
 * worker's loop to read them (after event_reinit it watches the same
 * descriptors), it would steal the parent's replies and make hiredis abort
 * on replies it never asked for. So at fork, in the child, every client's
 * descriptors are pointed at a fresh unconnected socket: the parent's
 * connections are untouched, the child's loop sees an error on them, and
 * the copy does nothing more (its calls return HILOCK_EFORK). */
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/core.h"

static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static hl_link clients = {&clients, &clients};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&clients_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&clients_lock); }

/* Only async-signal-safe calls here: socket, dup2, close. */
static void disown(hl_conn *k) {
    int fd = hl_conn_fd(k);
    if (fd < 0) return;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return;
    dup2(s, fd);
    close(s);
}

static void fork_child(void) {
    for (hl_link *l = clients.next; l != &clients; l = l->next) {
        hilock_client *c = HL_CONTAINER(l, hilock_client, all);
        c->loop.forked = 1;
        for (hl_node *n = hl_topo_first(&c->topo); n; n = hl_topo_next(&c->topo, n)) {
            disown(&n->cmd);
            disown(&n->sub);
        }
    }
    pthread_mutex_unlock(&clients_lock);
}

static void atfork_register(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void hl_fork_watch(hilock_client *c) {
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&clients_lock);
    hl_list_push(&clients, &c->all);
    pthread_mutex_unlock(&clients_lock);
}

void hl_fork_unwatch(hilock_client *c) {
    pthread_mutex_lock(&clients_lock);
    hl_list_remove(&c->all);
    pthread_mutex_unlock(&clients_lock);
}
