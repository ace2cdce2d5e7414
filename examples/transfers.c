/* transfers: money moved between accounts, each transfer holding the locks
 * of both its accounts at once (a multi-lock), from several clients.
 *
 *     transfers [REDIS_URL [ACCOUNTS [TRANSFERS [CLIENTS]]]]
 *
 * Defaults: redis://127.0.0.1:6379, 5 accounts, 300 transfers, 3 clients.
 *
 * Every transfer picks two accounts, in a random order (A to B and B to A
 * both happen, at the same time), and asks for both locks in one call,
 * hilock_acquire_multi(), through one of CLIENTS clients (each its own
 * connections, as separate processes would have). All are asked for at
 * once. A transfer that gets its locks moves an amount from one balance
 * to the other over a few milliseconds (a timer: the balances are "in
 * use" meanwhile), then releases both with one hilock_release().
 *
 * Two transfers that take the same two accounts in opposite orders would
 * deadlock with two plain locks taken one after the other. A multi-lock
 * takes its names in one global order, whatever the order given, so here
 * every transfer ends. The program checks the promises itself:
 *   - no account is used by two transfers at once;
 *   - each account's fencing tokens (hilock_hold_fence_at) strictly
 *     increase;
 *   - every transfer gets exactly one callback, a success, and releases;
 *   - the total of the balances is what it was.
 * It prints a line per account and exits 1 if a promise was broken or
 * anything failed.
 *
 * Build: cc transfers.c $(pkg-config --cflags --libs hilock) -levent
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <hilock/hilock.h>
#include <hilock/adapters/libevent.h>

#define MAX_ACCOUNTS 64
#define MAX_CLIENTS 16
#define START_BALANCE 1000

struct account {
    char name[32];          /* its lock's name */
    long balance;
    int in_use;             /* a transfer holds it right now */
    uint64_t last_fence;
    unsigned transfers;
};

struct bank;

struct transfer {
    struct bank *bank;
    int from, to;           /* indexes into bank->acct */
    long amount;
    unsigned callbacks;     /* acquire callbacks: must end as 1 */
    hilock_hold *hold;
    struct event *work;
};

struct bank {
    struct event_base *base;
    hilock_client *client[MAX_CLIENTS];
    int nclients, closed;
    struct account acct[MAX_ACCOUNTS];
    int naccts;
    struct transfer *t;
    int ntransfers, done, failed, broken;
};

static void on_closed(void *data) {
    struct bank *bank = data;
    bank->closed++;
}

/* Every transfer has ended: close the clients; the loop then exits. */
static void transfer_ended(struct bank *bank) {
    if (++bank->done < bank->ntransfers) return;
    for (int i = 0; i < bank->nclients; i++) hilock_client_close(bank->client[i], on_closed, bank);
}

static void on_released(int status, void *data) {
    struct transfer *t = data;
    if (status != 0) {
        fprintf(stderr, "release %s+%s: %s\n", t->bank->acct[t->from].name, t->bank->acct[t->to].name,
                hilock_strerror(status));
        t->bank->failed++;
    }
    transfer_ended(t->bank);
}

/* The transfer's work is over: move the money, give both accounts back,
 * release both locks in one call. */
static void on_work_done(evutil_socket_t fd, short what, void *data) {
    struct transfer *t = data;
    struct account *from = &t->bank->acct[t->from], *to = &t->bank->acct[t->to];
    (void)fd;
    (void)what;
    from->balance -= t->amount;
    to->balance += t->amount;
    from->in_use = to->in_use = 0;
    event_free(t->work);
    t->work = NULL;
    if (hilock_release(t->hold, on_released, t) != 0) {
        t->bank->failed++;
        transfer_ended(t->bank);
    }
}

/* Both locks are ours (one hold for both): check the promises, start the
 * work. The fences are in the order the names were given. */
static void on_locked(hilock_hold *hold, int status, void *data) {
    struct transfer *t = data;
    struct bank *bank = t->bank;
    int ids[2] = {t->from, t->to};
    if (++t->callbacks != 1) {
        fprintf(stderr, "BROKEN: a transfer's callback ran %u times\n", t->callbacks);
        bank->broken++;
        return;
    }
    if (status != 0) {
        fprintf(stderr, "transfer %s -> %s: %s\n", bank->acct[t->from].name, bank->acct[t->to].name,
                hilock_strerror(status));
        bank->failed++;
        transfer_ended(bank);
        return;
    }
    for (int i = 0; i < 2; i++) {
        struct account *a = &bank->acct[ids[i]];
        uint64_t fence = hilock_hold_fence_at(hold, (size_t)i);
        if (a->in_use) {
            fprintf(stderr, "BROKEN: %s granted while another transfer uses it\n", a->name);
            bank->broken++;
        }
        if (fence <= a->last_fence) {
            fprintf(stderr, "BROKEN: %s: fence %llu after %llu\n", a->name, (unsigned long long)fence,
                    (unsigned long long)a->last_fence);
            bank->broken++;
        }
        a->in_use = 1;
        a->last_fence = fence;
        a->transfers++;
    }
    t->hold = hold;
    struct timeval work = {0, 1000 + rand() % 3000}; /* 1-4 ms */
    t->work = evtimer_new(bank->base, on_work_done, t);
    if (t->work == NULL || evtimer_add(t->work, &work) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

static int start_transfers(struct bank *bank) {
    hilock_acquire_opts opts;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = 30000;
    for (int i = 0; i < bank->ntransfers; i++) {
        struct transfer *t = &bank->t[i];
        t->bank = bank;
        t->from = rand() % bank->naccts;
        t->to = (t->from + 1 + rand() % (bank->naccts - 1)) % bank->naccts;
        t->amount = 1 + rand() % 100;
        const char *names[2] = {bank->acct[t->from].name, bank->acct[t->to].name};
        int rc = hilock_acquire_multi(bank->client[i % bank->nclients], names, 2, &opts, on_locked, t, NULL);
        if (rc != 0) {
            fprintf(stderr, "hilock_acquire_multi: %s\n", hilock_strerror(rc));
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    static struct bank bank;
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    bank.naccts = argc > 2 ? atoi(argv[2]) : 5;
    bank.ntransfers = argc > 3 ? atoi(argv[3]) : 300;
    bank.nclients = argc > 4 ? atoi(argv[4]) : 3;
    if (bank.naccts < 2 || bank.naccts > MAX_ACCOUNTS || bank.ntransfers < 1 || bank.nclients < 1 ||
        bank.nclients > MAX_CLIENTS) {
        fprintf(stderr, "usage: transfers [REDIS_URL [ACCOUNTS (2-%d) [TRANSFERS [CLIENTS (1-%d)]]]]\n",
                MAX_ACCOUNTS, MAX_CLIENTS);
        return 2;
    }
    srand(42);
    long total = 0;
    for (int i = 0; i < bank.naccts; i++) {
        snprintf(bank.acct[i].name, sizeof bank.acct[i].name, "account-%d", i);
        bank.acct[i].balance = START_BALANCE;
        total += START_BALANCE;
    }
    bank.t = calloc((size_t)bank.ntransfers, sizeof *bank.t);
    bank.base = event_base_new();
    if (bank.t == NULL || bank.base == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    hilock_loop loop;
    hilock_libevent_init(&loop, bank.base);
    hilock_config cfg;
    hilock_config_init(&cfg);
    cfg.url = url;
    for (int i = 0; i < bank.nclients; i++) {
        int rc = hilock_client_new(&bank.client[i], &cfg, &loop);
        if (rc != 0) {
            fprintf(stderr, "hilock_client_new(%s): %s\n", url, hilock_strerror(rc));
            return 1;
        }
    }
    if (start_transfers(&bank) != 0) return 1;
    event_base_dispatch(bank.base); /* until every client has closed */

    long sum = 0;
    for (int i = 0; i < bank.naccts; i++) {
        struct account *a = &bank.acct[i];
        printf("%-12s balance %5ld, %3u transfers, last fence %llu\n", a->name, a->balance, a->transfers,
               (unsigned long long)a->last_fence);
        sum += a->balance;
    }
    for (int i = 0; i < bank.ntransfers; i++)
        if (bank.t[i].callbacks != 1) {
            fprintf(stderr, "BROKEN: transfer %d got %u callbacks\n", i, bank.t[i].callbacks);
            bank.broken++;
        }
    if (sum != total) {
        fprintf(stderr, "BROKEN: the balances add up to %ld, not %ld\n", sum, total);
        bank.broken++;
    }
    printf("%d transfers by %d clients on %d accounts: %d failed, %d promises broken; total %ld (was %ld)\n",
           bank.ntransfers, bank.nclients, bank.naccts, bank.failed, bank.broken, sum, total);
    event_base_free(bank.base);
    free(bank.t);
    return bank.failed || bank.broken || bank.closed != bank.nclients ? 1 : 0;
}
