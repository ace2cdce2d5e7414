/* hilock: run a command while holding a distributed lock, a flock(1) for
 * machines that share one Redis.
 *
 *     hilock [-u URL] [-w WAIT_MS] [-l LEASE_MS] [--starve MS] [--kill-after MS] [-p PREFIX] [-E CODE] [-n N | -s | -x | -f] [-v] NAME -- COMMAND [ARG...]
 *     hilock [OPTIONS] -m NAME [-m NAME...] -- COMMAND [ARG...]
 *     hilock unlock [-u URL] [-p PREFIX] [-v] NAME
 *     hilock revoke [-u URL] [-p PREFIX] [-v] NAME
 *     hilock elect [OPTIONS] NAME [--value V] -- COMMAND [ARG...]
 *     hilock leader [-u URL] [-p PREFIX] NAME
 *     hilock observe [-u URL] [-p PREFIX] NAME
 *     hilock inspect [-u URL] [-p PREFIX] [--json] NAME... | --scan PATTERN
 *
 * A subcommand's options go before its name or after it, with the same
 * meaning (see "The command line").
 *
 * Everything happens on one libevent loop: the lock request, the watchdog
 * that renews the lease while COMMAND runs (inside the library), signals, and
 * the end of COMMAND (SIGCHLD). Nothing polls and nothing sleeps, but for a
 * check every 100 ms, after a lost lock, that COMMAND's process group is gone
 * (a backstop: SIGCHLD says it first, see check_gone).
 *
 * COMMAND runs in a process group of its own, as a shell runs a job, so that
 * a lost lock can end everything COMMAND started (killpg) while hilock, in
 * another group, lives on to exit 74. When hilock holds the terminal, it
 * hands it to that group (Ctrl-C and Ctrl-Z reach COMMAND and its pipeline)
 * and takes it back when COMMAND stops or ends; see "Job control".
 *
 * Exit statuses follow sysexits(3) where one fits, so that scripts can tell
 * "someone else has it" (75, or -E's) from "Redis is down" (69) from
 * COMMAND's own failures, which pass through unchanged. The one table of
 * them is in usage_text, docs/cli.md and man/hilock.1 alike (tests/cli/cli.c
 * compares the three). */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sysexits.h>
#include <unistd.h>
#include <event2/event.h>
#include "hilock/hilock.h"
#include <hilock/adapters/libevent.h>
#include "tools/inspect.h"
#include "tools/tlsopt.h"
#include "tools/urlshow.h"

#define DEFAULT_URL    "redis://127.0.0.1:6379"
#define DEFAULT_PREFIX "hilock:"
#define DEFAULT_LEASE  30000
#define DEFAULT_KILL_AFTER 5000 /* ms from SIGTERM to SIGKILL after a loss */
#define GONE_CHECK_MS  100      /* the backstop of check_gone */

/* Long options of our own, numbered after the TLS ones (tlsopt.h);
 * --json and --scan are inspect's. */
enum { OPT_STARVE = OPT_INSECURE + 1, OPT_KILL_AFTER, OPT_JSON, OPT_SCAN, OPT_ON_REVOKE, OPT_VALUE };

static const char usage_text[] =
"Usage: hilock [-u URL] [-w WAIT_MS] [-l LEASE_MS] [--starve MS]\n"
"              [--kill-after MS] [--on-revoke SIGNAL] [-p PREFIX] [-E CODE]\n"
"              [-n N | -s | -x | -f] [TLS OPTIONS] [-v] NAME -- COMMAND [ARG...]\n"
"       hilock [-u URL] [-w WAIT_MS] [-l LEASE_MS] [--starve MS] [--kill-after MS]\n"
"              [-p PREFIX] [-E CODE] [TLS OPTIONS] [-v] -m NAME [-m NAME...]\n"
"              -- COMMAND [ARG...]\n"
"       hilock unlock [-u URL] [-p PREFIX] [TLS OPTIONS] [-v] NAME\n"
"       hilock revoke [-u URL] [-p PREFIX] [TLS OPTIONS] [-v] NAME\n"
"       hilock elect [-u URL] [-w WAIT_MS] [-l LEASE_MS] [--kill-after MS]\n"
"              [-p PREFIX] [-E CODE] [TLS OPTIONS] [-v] NAME [--value V]\n"
"              -- COMMAND [ARG...]\n"
"       hilock leader [-u URL] [-p PREFIX] [TLS OPTIONS] NAME\n"
"       hilock observe [-u URL] [-p PREFIX] [TLS OPTIONS] NAME\n"
"       hilock inspect [-u URL] [-p PREFIX] [TLS OPTIONS] [--json]\n"
"              NAME... | --scan PATTERN\n"
"       hilock -h | --help | -V | --version\n"
"Run COMMAND while holding the distributed lock NAME in Redis.\n"
"\n"
"The options of unlock, revoke and inspect go before or after the\n"
"subcommand's name (and its NAMEs), with the same meaning: `hilock -u URL\n"
"unlock NAME` is `hilock unlock -u URL NAME`. Those of NAME -- COMMAND go\n"
"before NAME. An option that a form does not take is a usage error naming\n"
"both: -w, -l, --starve, --kill-after, --on-revoke, -E, -n, -s, -x, -f and -m\n"
"are for NAME -- COMMAND only, --json and --scan for inspect only, -v not for\n"
"inspect. unlock, revoke and inspect are subcommands unless -- follows them:\n"
"`hilock unlock -- COMMAND` runs COMMAND under a lock named \"unlock\".\n"
"\n"
"  -u URL         Redis URL (default: $HILOCK_URL, else " DEFAULT_URL ")\n"
"  -w WAIT_MS     give up after waiting this long (default: wait forever;\n"
"                 0: try once)\n"
"  -l LEASE_MS    lease of the lock, renewed while COMMAND runs (default 30000)\n"
"  --starve MS    after waiting MS ms, stop racing for the lock and be handed\n"
"                 it in turn with the other waits that have waited that long,\n"
"                 on any machine (default: $HILOCK_STARVE, else 100; off:\n"
"                 always race); for the mutex, -n, -s and -x: ignored by -f\n"
"                 (first come, first served anyway) and over Redlock\n"
"  --kill-after MS\n"
"                 if the lock is lost, COMMAND's process group gets SIGTERM,\n"
"                 then SIGKILL MS ms later if any of it still runs (default\n"
"                 5000; 0: SIGKILL at once)\n"
"  --on-revoke SIGNAL\n"
"                 when `hilock revoke NAME` asks for the lock, send SIGNAL\n"
"                 (a name, as TERM or SIGUSR1, or a number) to COMMAND's\n"
"                 process group, once: COMMAND decides whether to end (the\n"
"                 lock is released when it exits). The mutex only, not over\n"
"                 Redlock. Default: a revoke is ignored\n"
"  -p PREFIX      prefix of the Redis keys (default " DEFAULT_PREFIX "; no braces,\n"
"                 at most 256 bytes)\n"
"  -E CODE        exit status when NAME is busy or not acquired within WAIT_MS\n"
"                 (1 to 255, default 75), to tell it from COMMAND's own\n"
"  -n N           hold one of N permits of the semaphore NAME instead of the\n"
"                 lock NAME: at most N COMMANDs run at once (1 to 1000000;\n"
"                 every user of NAME must give the same N)\n"
"  -s             shared: hold the read lock of the read-write lock NAME; any\n"
"                 number of -s holders run at once, none beside a -x holder\n"
"  -x             exclusive: hold the write lock of the read-write lock NAME,\n"
"                 alone (a waiting -x holds off new -s holders)\n"
"  -f             fair: hold the fair lock NAME, granted to its waiters in the\n"
"                 order they asked, over all machines (first come, first served)\n"
"  -m NAME        hold the lock NAME too, as many times as there are locks to\n"
"                 hold (then no NAME before --): all of them or none, taken in\n"
"                 one order on every machine so that no two hilocks deadlock,\n"
"                 released together; losing one is losing them all\n"
"  -v             report progress on stderr\n"
"\n"
"TLS options, for rediss://, rediss-sentinel:// and redlocks:// URLs (each\n"
"defaults to the environment variable named after it):\n"
"  --cacert FILE  CA certificates (PEM) the server's must chain to\n"
"                 ($HILOCK_CACERT; neither this nor --capath: the system's)\n"
"  --capath DIR   a directory of hashed CA certificates ($HILOCK_CAPATH)\n"
"  --cert FILE    client certificate (PEM) for mutual TLS ($HILOCK_CERT)\n"
"  --key FILE     its private key (PEM), needed with --cert ($HILOCK_KEY)\n"
"  --sni NAME     the name the server's certificate must carry, sent as SNI\n"
"                 ($HILOCK_SNI; default: the URL's host)\n"
"  --insecure     do not verify the server's certificate: for self-signed\n"
"                 test setups only ($HILOCK_INSECURE=1)\n"
"\n"
"  -h, --help     show this help\n"
"  -V, --version  show the version\n"
"\n"
"COMMAND finds the lock name in $HILOCK_NAME and the fencing token, a number\n"
"that grows with every acquisition of NAME, in $HILOCK_FENCE (with -s: the\n"
"fence of the last -x holder, 0 if none). With -m, $HILOCK_NAME and\n"
"$HILOCK_FENCE are the first -m NAME's, and $HILOCK_FENCES has every NAME's\n"
"fence, in the order of the -m options, separated by spaces.\n"
"\n"
"COMMAND runs in a process group of its own. If hilock is in the foreground\n"
"of a terminal, that group gets the terminal while COMMAND runs: Ctrl-C and\n"
"Ctrl-Z reach COMMAND and every process it started (a Ctrl-C that ends\n"
"COMMAND ends hilock too, by SIGINT, once the lock is released). If the lock\n"
"is lost, the whole group gets SIGTERM, then SIGKILL (--kill-after), and\n"
"hilock exits 74 only when none of it is left. When COMMAND exits while the\n"
"lock is held, processes it left running in the background are not\n"
"signalled: they run on without the lock (have COMMAND wait for them to keep\n"
"them under it).\n"
"\n"
"Without -n, -s, -x or -f, NAME is a plain mutex: a different lock from the\n"
"read-write lock NAME that -s and -x share, the fair lock NAME (-f) and the\n"
"semaphore NAME (-n), so `hilock NAME` and `hilock -x NAME` do not exclude\n"
"each other.\n"
"\n"
"hilock unlock NAME removes the lock NAME whoever holds it and wakes its\n"
"waiters: for a holder known dead whose lease is too long to wait out. It\n"
"prints the fence of the lock it removed, with a warning on stderr that a\n"
"holder still alive keeps acting as the owner until its next renewal fails,\n"
"or that NAME was not held. It exits 0 either way (NAME is free), 64 (usage)\n"
"or 69 (Redis could not be used).\n"
"\n"
"hilock revoke NAME asks the holder of the lock NAME to release it: a hilock\n"
"that holds it with --on-revoke signals its COMMAND, others do nothing. It\n"
"never takes the lock away. It prints the fence of the holder asked, or that\n"
"NAME was not held, and exits 0 either way, 64 (usage) or 69 (Redis could\n"
"not be used).\n"
"\n"
"hilock elect NAME -- COMMAND campaigns in the election NAME (not the lock\n"
"NAME), standing with --value V (default: empty), and runs COMMAND while it\n"
"leads, as NAME -- COMMAND runs it while it holds the lock; COMMAND finds the\n"
"leader's epoch, which grows with every new leader, in $HILOCK_EPOCH (and\n"
"$HILOCK_FENCE). hilock leader NAME prints \"EPOCH VALUE\" of the leader, and\n"
"exits 1 when nobody leads. hilock observe NAME prints such a line now and at\n"
"every change of leader (\"0\" when nobody leads), until it is killed.\n"
"\n"
"hilock inspect NAME... shows, per NAME, whether its locks are held, by whom,\n"
"their fences, leases and waiting processes; --scan PATTERN lists the held\n"
"locks whose NAME matches; see hilock inspect --help. It exits 0, 64 (usage)\n"
"or 69 (Redis could not be used).\n"
"\n"
"Signals: SIGINT, SIGTERM and SIGHUP while waiting cancel the wait, leave no\n"
"lock behind, and exit 128+N. While COMMAND runs they are passed on to its\n"
"process group, and the lock is released when COMMAND exits; after that they\n"
"are ignored until the release is done. SIGTSTP is passed on too: hilock\n"
"stops once COMMAND has, and SIGCONT continues both. SIGSTOP cannot be\n"
"caught: a hilock stopped by it alone leaves COMMAND running and renews\n"
"nothing. One that was ignored when hilock started (nohup, a shell's &) stays\n"
"ignored, by hilock and by COMMAND. If hilock itself is killed, COMMAND gets\n"
"SIGTERM. unlock and revoke do not catch them.\n"
"\n"
"Exit status:\n"
"  COMMAND's  COMMAND ran: its own status; 128+N if signal N killed it,\n"
"             127 if it was not found, 126 if it could not be run\n"
"  1          hilock leader: nobody leads NAME\n"
"  64         usage error\n"
"  69         Redis could not be used: HILOCK_ECONN (unreachable, connection\n"
"             broke), HILOCK_EDEADLINE (no answer in time), HILOCK_EPROTO (not\n"
"             Redis), HILOCK_EAUTH (authentication failed), HILOCK_EREADONLY\n"
"             (read-only replica), HILOCK_EOOM (out of memory),\n"
"             HILOCK_ELOADING (still loading), HILOCK_ESCRIPT (lock script\n"
"             failed), HILOCK_EREPLY (other error reply), HILOCK_EEVICTION\n"
"             (eviction policy refused; hilock itself only warns, on stderr),\n"
"             HILOCK_ETLS (TLS failed, or not built in)\n"
"  70         internal failure: HILOCK_ENOMEM (out of memory), HILOCK_ELOOP\n"
"             (event-loop adapter)\n"
"  71         system failure (fork, setenv, event loop or signal setup)\n"
"  74         the lock was lost while COMMAND ran: COMMAND's process group got\n"
"             SIGTERM, then SIGKILL (--kill-after); hilock exits once none of\n"
"             it is left\n"
"  75         the lock was not acquired within WAIT_MS (-w 0: it was held);\n"
"             -E CODE changes this status\n"
"  78         -n N differs from the N that NAME's holders use (HILOCK_EPERMITS)\n"
"  128+N      signal N stopped the wait\n";

/* The signals we catch, unless they were ignored when we started (see
 * must_catch). SIGTSTP and SIGCONT are for job control (Ctrl-Z, fg, bg):
 * COMMAND's group is not ours, so we pass them on. Everything else keeps its
 * inherited disposition, but for those of `own`. */
static const int caught[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT };
#define NCAUGHT (sizeof(caught) / sizeof(caught[0]))

/* The signals we set for ourselves and give back to COMMAND as we found
 * them: SIGPIPE ignored (a broken Redis connection must not kill us), and
 * SIGTTIN and SIGTTOU ignored, as timeout(1) does, so that hilock is not
 * stopped when it writes to, or hands over, a terminal from the background. */
static const int own[] = { SIGPIPE, SIGTTIN, SIGTTOU };
#define NOWN (sizeof(own) / sizeof(own[0]))

enum { ST_WAITING, ST_RUNNING, ST_ENDING };

typedef struct cli {
    struct event_base *base;
    struct event *sigev[NCAUGHT];
    hilock_client *client;
    hilock_wait *wait;      /* valid until on_acquired runs */
    hilock_multi *mwait;    /* -m's, likewise */
    const char *multi[HILOCK_MULTI_MAX]; /* -m NAME, in their order */
    size_t nmulti;
    hilock_hold *hold;      /* valid until on_released runs */
    const char *name;
    char **cmd;
    int verbose;
    int busy_status;        /* exit status for busy / not acquired in time (-E) */
    unsigned permits_total; /* -n N: a permit of the semaphore NAME; 0: the lock */
    char mode;              /* 0: the mutex NAME; 's' / 'x': the read / write lock
                               of the read-write lock NAME; 'f': the fair lock */
    int state;
    pid_t child;            /* COMMAND, once started; also its process group */
    int reaped;             /* COMMAND has exited (and was waited for) */
    int stopped;            /* COMMAND was seen stopped, not yet continued */
    int tstp_passed;        /* a SIGTSTP was passed on: stop when COMMAND does */
    int tty;                /* our controlling terminal, or -1 */
    long long kill_after;   /* --kill-after: ms from SIGTERM to SIGKILL */
    struct event *kill_timer;   /* SIGKILL to the group, --kill-after after a loss */
    struct event *gone_timer;   /* check_gone's backstop */
    int eperm_said;         /* said that some of the group may not be signalled */
    int passed_sig;         /* the last signal we passed on to COMMAND's group */
    int revoke_sig;         /* --on-revoke: for COMMAND's group when a revoke asks; 0: none */
    const char *value;      /* elect --value V */
    hilock_observer *observer; /* observe NAME */
    int reraise;            /* SIGINT: end with it, after the release (command_ended) */
    int stop_sig;           /* the signal that stopped the wait */
    int lost;               /* the library told us the lock was lost */
    int status;             /* our exit status */
} cli;

/* What we must give back to COMMAND: the signal dispositions and mask we
 * were started with (so `nohup hilock ...` still ignores SIGHUP in COMMAND),
 * and only the file descriptors we inherited. */
static struct sigaction saved_act[NCAUGHT + NOWN];
static sigset_t saved_mask;
static int *inherited_fds;
static size_t n_inherited;

/* Whether to catch caught[i]. A stop signal that we were started with
 * ignored stays ignored while we wait and while COMMAND runs: that is what
 * `nohup hilock ...` and a script's `hilock ... &` (SIGINT ignored) ask for.
 * Not caught, it is not passed on either; COMMAND, which inherits the
 * disposition, would ignore it anyway (SIGTSTP likewise). SIGCHLD is
 * different: it is how we learn that COMMAND ended, so we catch it whatever
 * it was, and COMMAND gets back what we were given. SIGCONT continues us
 * whatever its disposition; we catch it to continue COMMAND too. */
static int must_catch(size_t i) {
    return caught[i] == SIGCHLD || caught[i] == SIGCONT || saved_act[i].sa_handler != SIG_IGN;
}

/* The help that usage errors point to: inspect's own, once the command
 * line is known to be `hilock inspect ...` (parse_args). */
static const char *help_cmd = "hilock --help";

/* One line that says what is wrong, and where to read more: the whole
 * usage text would bury the line that matters, as coreutils knows. */
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fputs("hilock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s' for more information.\n", help_cmd);
    return EX_USAGE;
}

/* The header we were compiled with, and the library we run with if that
 * differs (a shared libhilock upgraded or downgraded under us). */
static void print_version(void) {
    if (strcmp(hilock_version(), HILOCK_VERSION) == 0)
        printf("hilock %s\n", HILOCK_VERSION);
    else
        printf("hilock %s (library %s)\n", HILOCK_VERSION, hilock_version());
}

/* A decimal number in [min, max], nothing else (no sign, no spaces, no
 * unit): NULL, with *out set, or why s is not one, for the usage error
 * (which then says the range). */
static const char *parse_num(const char *s, long long min, long long max, long long *out) {
    static const char digits[] = "0123456789";
    long long v;

    if (*s == '\0') return "empty";
    if (s[0] == '-' && s[1] != '\0' && s[1 + strspn(s + 1, digits)] == '\0') return "negative";
    if (s[strspn(s, digits)] != '\0') return "not a decimal number";
    errno = 0;
    v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v > max) return "too large";
    if (v < min) return "too small";
    *out = v;
    return NULL;
}

/* ---- Handing over to COMMAND ------------------------------------------ */

static void note_inherited_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (d == NULL) return; /* no /proc: the child then keeps every fd */
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        int *more;
        if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
        more = realloc(inherited_fds, (n_inherited + 1) * sizeof(*more));
        if (more == NULL) break;
        inherited_fds = more;
        inherited_fds[n_inherited++] = fd;
    }
    closedir(d);
}

/* In the child: close on exec every fd we opened ourselves (Redis sockets,
 * libevent's internals). A background grandchild of COMMAND would otherwise
 * keep our Redis connections, and the subscriptions on them, alive after we
 * are gone. Safe after fork because this program has one thread. */
static void cloexec_own_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (d == NULL) return;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name), ours = 1;
        size_t i;
        if (e->d_name[0] == '.' || fd <= 2 || fd == dirfd(d)) continue;
        for (i = 0; i < n_inherited; i++)
            if (inherited_fds[i] == fd) ours = 0;
        if (ours) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(d);
}

/* Our controlling terminal, to hand to COMMAND's group and take back; -1
 * if we have none (a service, cron, a test). /dev/tty names it whatever
 * stdin is; a standard fd that is that terminal will do where /dev/tty
 * cannot be opened. Close-on-exec: it is ours, not COMMAND's. */
static int open_tty(void) {
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC), i;

    for (i = 0; fd < 0 && i <= 2; i++)
        if (isatty(i) && tcgetpgrp(i) >= 0) fd = fcntl(i, F_DUPFD_CLOEXEC, 3);
    return fd;
}

/* Start COMMAND as a job of its own: the leader of a new process group (set
 * in the child and in the parent, as shells do, so that the group exists
 * whichever runs first), given the terminal if our group has it. */
static pid_t spawn(cli *c) {
    sigset_t all, old;
    pid_t pid, parent = getpid();
    size_t i;
    int err, foreground;

    c->tty = c->tty >= 0 ? c->tty : open_tty();
    foreground = c->tty >= 0 && tcgetpgrp(c->tty) == getpgrp();
    /* Block every signal across fork: until exec, the child still runs
     * libevent's handlers, which would write into the signal pipe it shares
     * with us and make us see the child's signals as our own. Blocked, they
     * also let the child take the terminal from the background (SIGTTOU). */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        int code;
        for (i = 0; i < NCAUGHT; i++) sigaction(caught[i], &saved_act[i], NULL);
        for (i = 0; i < NOWN; i++) sigaction(own[i], &saved_act[NCAUGHT + i], NULL);
        setpgid(0, 0);
        if (foreground) tcsetpgrp(c->tty, getpid());
#ifdef PR_SET_PDEATHSIG
        /* We hold the lock for COMMAND: if we die, it has none. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(128 + SIGTERM);
#else
        (void)parent;
#endif
        cloexec_own_fds();
        sigprocmask(SIG_SETMASK, &saved_mask, NULL);
        execvp(c->cmd[0], c->cmd);
        /* As shells do: 127 when there is no such command, 126 otherwise. */
        code = errno == ENOENT ? 127 : 126;
        fprintf(stderr, "hilock: %s: %s\n", c->cmd[0], strerror(errno));
        _exit(code);
    }
    err = errno;
    if (pid > 0) setpgid(pid, pid); /* EACCES: it has exec'd, so it did it */
    sigprocmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return pid;
}

/* "hilock: WHAT NAME: <code's message> (<what Redis or the socket said>)" */
static void report(const cli *c, const char *what, int err) {
    const char *detail = hilock_client_errstr(c->client);

    /* ETLS's own text is about builds; the detail says what the handshake met. */
    if (err == HILOCK_ETLS && *detail != '\0')
        fprintf(stderr, "hilock: %s %s: %s\n", what, c->name, detail);
    else if (err == HILOCK_ELOST || *detail == '\0')
        fprintf(stderr, "hilock: %s %s: %s\n", what, c->name, hilock_strerror(err));
    else
        fprintf(stderr, "hilock: %s %s: %s (%s)\n", what, c->name, hilock_strerror(err), detail);
}

/* Every failure that comes from Redis or the way to it is "the service is
 * unavailable" (69), whatever the library calls it: a script cannot do more
 * about a read-only replica than about a refused connection, and must not
 * mistake either for a bug in hilock (70). Keep this list, the usage text,
 * docs/cli.md and man/hilock.1 in step. */
static int exit_for_error(int err) {
    switch (err) {
    case HILOCK_ECONN: case HILOCK_EDEADLINE: case HILOCK_EPROTO:
    case HILOCK_EAUTH: case HILOCK_EREPLY: case HILOCK_EREADONLY:
    case HILOCK_EOOM: case HILOCK_ELOADING: case HILOCK_ESCRIPT: case HILOCK_EEVICTION:
    case HILOCK_ETLS:
        return EX_UNAVAILABLE;
    default:
        return EX_SOFTWARE; /* ENOMEM, ELOOP: our side failed */
    }
}

/* The library's warnings (e.g. a server that may evict locks) go to stderr
 * whatever -v says: they are about safety, not progress. */
static void on_log(int level, const char *msg, void *arg) {
    cli *c = arg;

    if (level <= HILOCK_LOG_WARNING || c->verbose)
        fprintf(stderr, "hilock: %s%s\n", level <= HILOCK_LOG_WARNING ? "warning: " : "", msg);
}

/* ---- The end: release, close, leave the loop --------------------------- */

static void on_closed(void *arg) {
    cli *c = arg;
    size_t i;

    c->client = NULL;
    /* Our signal events would keep the loop running forever. */
    for (i = 0; i < NCAUGHT; i++)
        if (c->sigev[i] != NULL) event_del(c->sigev[i]);
    if (c->kill_timer != NULL) event_del(c->kill_timer);
    if (c->gone_timer != NULL) event_del(c->gone_timer);
    event_base_loopexit(c->base, NULL);
}

static void on_released(int status, void *arg) {
    cli *c = arg;

    c->hold = NULL;
    if (status == HILOCK_ELOST) {
        /* The key expired or changed hands before the watchdog noticed:
         * COMMAND may not have run alone, and the caller must know. */
        if (c->child > 0) {
            if (!c->lost) fprintf(stderr, "hilock: the lock %s was lost while COMMAND ran\n", c->name);
            c->status = EX_IOERR;
        }
    } else if (status < 0) {
        report(c, "could not release", status); /* the key expires after its lease */
    } else if (c->verbose) {
        fprintf(stderr, "hilock: released %s\n", c->name);
    }
    hilock_client_close(c->client, on_closed, c);
}

/* Leave with `status`, after giving back the lock if we hold it. Waiting for
 * the release reply means the next holder can rely on our exit. */
static void finish(cli *c, int status) {
    c->state = ST_ENDING;
    c->status = status;
    if (c->hold != NULL && hilock_release(c->hold, on_released, c) == 0) return;
    hilock_client_close(c->client, on_closed, c);
}

/* ---- Job control ---------------------------------------------------------
 *
 * COMMAND's group is a job that the shell does not know: we act for it as a
 * shell would. COMMAND gets the terminal when we have it (spawn, and again
 * at SIGCONT: `fg`); when COMMAND stops with it (Ctrl-Z) we take the
 * terminal back and stop too, so that the shell sees its job stopped; when
 * we are continued, so is COMMAND. While stopped we renew nothing: a job
 * stopped for longer than the lease loses the lock, and is ended when it is
 * continued. */

/* Give the terminal to COMMAND's group if ours has it. */
static void give_terminal(cli *c) {
    if (c->tty >= 0 && tcgetpgrp(c->tty) == getpgrp()) tcsetpgrp(c->tty, c->child);
}

/* Take the terminal back if COMMAND's group has it: whether we did. SIGTTOU,
 * which tcsetpgrp raises in a background group, is ignored (see own). */
static int take_terminal(cli *c) {
    return c->tty >= 0 && tcgetpgrp(c->tty) == c->child && tcsetpgrp(c->tty, getpgrp()) == 0;
}

/* Stop with `sig` (a stop signal but SIGSTOP) as if we had not caught or
 * ignored it: `group`, our whole process group, as Ctrl-Z would have. Only
 * for the time of the stop: its handler comes back when we are continued.
 * In an orphaned process group, whose stops nobody could undo, the kernel
 * drops the signal and we go on. */
static void stop_like(int sig, int group) {
    struct sigaction dfl, old;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, &old);
    if (group) killpg(getpgrp(), sig);
    else kill(getpid(), sig);
    sigaction(sig, &old, NULL);
}

/* We were continued (SIGCONT): so is COMMAND, with the terminal if `fg` gave
 * it to us. */
static void continue_command(cli *c) {
    if (c->state != ST_RUNNING || c->reaped) return;
    give_terminal(c);
    killpg(c->child, SIGCONT);
    c->stopped = 0;
}

/* COMMAND stopped with signal `sig`. If it had the terminal (Ctrl-Z), our
 * job stops too, as the shell expects of its foreground job; if we passed a
 * SIGTSTP on, we stop. A COMMAND in the background that wants the terminal
 * (SIGTTIN, SIGTTOU) gets it if our job has it (`fg` of a job that runs
 * gives the terminal without a SIGCONT), else we stop too, so that the shell
 * shows the job stopped and `fg` continues it. Else (SIGSTOP from someone)
 * we stay, and renew the lock for COMMAND meanwhile: were we stopped, a
 * COMMAND continued alone would run on without it. */
static void command_stopped(cli *c, int sig) {
    int tty_stop = sig == SIGTTIN || sig == SIGTTOU, had_terminal;

    c->stopped = 1;
    if (tty_stop && c->tty >= 0 && tcgetpgrp(c->tty) == getpgrp()) {
        continue_command(c);
        return;
    }
    had_terminal = take_terminal(c);
    if (!had_terminal && !c->tstp_passed && !tty_stop) return;
    c->tstp_passed = 0;
    stop_like(sig == SIGSTOP ? SIGTSTP : sig, had_terminal);
    /* Continued: continue_command runs at our SIGCONT. Here too, for a stop
     * that the kernel dropped (an orphaned group); not after a SIGTTIN or
     * SIGTTOU, which COMMAND would only meet again. */
    if (!tty_stop) continue_command(c);
}

/* ---- Ending COMMAND's group ------------------------------------------------ */

/* Signal COMMAND's group, and COMMAND itself in case it left it (setpgid). */
static void signal_group(cli *c, int sig) {
    killpg(c->child, sig);
    if (!c->reaped && getpgid(c->child) != c->child) kill(c->child, sig);
}

/* Whether a process of COMMAND's group is left. A zombie counts until it is
 * reaped, which is why we are the subreaper of COMMAND's orphans. Processes
 * we may not signal (another user's, under sudo) are waited for. */
static int group_alive(cli *c) {
    if (kill(-c->child, 0) == 0) return 1;
    if (errno != EPERM) return 0;
    if (!c->eperm_said)
        fprintf(stderr, "hilock: COMMAND's process group has processes that hilock may not "
                        "signal; waiting for them to exit\n");
    c->eperm_said = 1;
    return 1;
}

/* After a loss: exit 74 once COMMAND has exited and its group is gone. Run
 * at each SIGCHLD (the death of the group's last process is one: its parent
 * is COMMAND, a process of the group, or us, their subreaper) and every
 * GONE_CHECK_MS in case it is not (a process that joined the group from
 * elsewhere, a system without subreapers). */
static void check_gone(cli *c) {
    if (c->state != ST_RUNNING || !c->reaped || group_alive(c)) return;
    event_del(c->kill_timer);
    event_del(c->gone_timer);
    finish(c, EX_IOERR);
}

static void on_gone_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    check_gone(arg);
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg) {
    cli *c = arg;

    (void)fd;
    (void)what;
    if (c->state != ST_RUNNING || (c->reaped && !group_alive(c))) return;
    fprintf(stderr, "hilock: COMMAND's process group still runs %lld ms after SIGTERM: "
                    "sending SIGKILL\n", c->kill_after);
    signal_group(c, SIGKILL);
}

/* The lock is lost: end COMMAND and everything in its group, SIGTERM first
 * (with SIGCONT, for a stopped one to see it), SIGKILL --kill-after later. */
static void end_group(cli *c) {
    struct timeval tv = { (time_t)(c->kill_after / 1000), (suseconds_t)(c->kill_after % 1000 * 1000) };
    struct timeval gone = { 0, GONE_CHECK_MS * 1000 };

    if (c->kill_after == 0) {
        signal_group(c, SIGKILL);
    } else {
        signal_group(c, SIGTERM);
        signal_group(c, SIGCONT);
        event_add(c->kill_timer, &tv);
    }
    event_add(c->gone_timer, &gone);
}

/* ---- Events ------------------------------------------------------------- */

/* -m: $HILOCK_FENCES, each NAME's fence in the order of the -m options. */
static int set_fences(const cli *c) {
    char *all = malloc(c->nmulti * 21 + 1);
    size_t i, len = 0;
    int rc;

    if (all == NULL) return -1;
    all[0] = '\0';
    for (i = 0; i < c->nmulti; i++)
        len += (size_t)sprintf(all + len, "%s%" PRIu64, i ? " " : "", hilock_hold_fence_at(c->hold, i));
    rc = setenv("HILOCK_FENCES", all, 1);
    free(all);
    return rc;
}

static void run_command(cli *c) {
    char fence[24];

    snprintf(fence, sizeof(fence), "%" PRIu64, hilock_hold_fence(c->hold));
    if (c->verbose) fprintf(stderr, "hilock: acquired %s with fence %s\n", c->name, fence);
    if (setenv("HILOCK_NAME", c->nmulti ? c->multi[0] : c->name, 1) != 0 ||
        setenv("HILOCK_FENCE", fence, 1) != 0 || (c->mode == 'e' && setenv("HILOCK_EPOCH", fence, 1) != 0) ||
        (c->nmulti && set_fences(c) != 0)) {
        fprintf(stderr, "hilock: setenv: %s\n", strerror(errno));
        finish(c, EX_OSERR);
        return;
    }
    c->kill_timer = evtimer_new(c->base, on_kill_timer, c);
    c->gone_timer = event_new(c->base, -1, EV_PERSIST, on_gone_timer, c);
    if (c->kill_timer == NULL || c->gone_timer == NULL) {
        fprintf(stderr, "hilock: cannot create a timer\n");
        finish(c, EX_OSERR);
        return;
    }
#ifdef PR_SET_CHILD_SUBREAPER
    /* COMMAND's orphans become our children, so that we reap them: a zombie
     * is still a process of the group (and init may not reap them). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
    c->child = spawn(c);
    if (c->child < 0) {
        fprintf(stderr, "hilock: fork: %s\n", strerror(errno));
        finish(c, EX_OSERR);
        return;
    }
    c->state = ST_RUNNING;
}

/* `hilock revoke NAME` asked for the lock (--on-revoke): COMMAND's group
 * gets the signal, once, and decides; the lock goes when COMMAND exits. */
static void on_revoke(hilock_hold *hold, void *arg) {
    cli *c = arg;

    (void)hold;
    if (c->state != ST_RUNNING || c->reaped) return;
    if (c->verbose)
        fprintf(stderr, "hilock: a revoke asks for %s: signal %d to COMMAND\n", c->name, c->revoke_sig);
    c->passed_sig = c->revoke_sig;
    killpg(c->child, c->revoke_sig);
    if (c->stopped) killpg(c->child, SIGCONT);
}

static void on_acquired(hilock_hold *hold, int status, void *arg) {
    cli *c = arg;

    c->wait = NULL; /* the handle is gone once its callback has run */
    c->mwait = NULL;
    if (status == 0) {
        c->hold = hold;
        /* Checked before the wait: the mutex, not over Redlock. */
        if (c->revoke_sig != 0) hilock_hold_on_revoke(hold, on_revoke, c);
        /* A signal came while the lock was being granted: give it back. */
        if (c->stop_sig) finish(c, 128 + c->stop_sig);
        else run_command(c);
        return;
    }
    if (c->stop_sig) {
        finish(c, 128 + c->stop_sig);
    } else if (status == HILOCK_EBUSY || status == HILOCK_ETIMEDOUT) {
        if (c->verbose) fprintf(stderr, "hilock: %s is busy: %s\n", c->name, hilock_strerror(status));
        finish(c, c->busy_status);
    } else if (status == HILOCK_EPERMITS) {
        report(c, "cannot take a permit of", status);
        finish(c, EX_CONFIG);
    } else {
        report(c, "cannot lock", status);
        finish(c, exit_for_error(status));
    }
}

static void on_lost(hilock_hold *hold, int why, void *arg) {
    cli *c = arg;

    (void)hold;
    c->lost = 1;
    report(c, "lost the lock", why);
    /* Someone else may hold it now: end COMMAND's group, then exit 74 when
     * none of it is left (check_gone). */
    if (c->state == ST_RUNNING && !c->reaped) end_group(c);
}

/* Whether COMMAND is to get SIGINT from the terminal: it was not ignored
 * when we started. */
static int sigint_wanted(void) {
    size_t i;

    for (i = 0; i < NCAUGHT; i++)
        if (caught[i] == SIGINT) return must_catch(i);
    return 0;
}

/* COMMAND ended with wait status st. */
static void command_ended(cli *c, int st) {
    c->reaped = 1;
    /* A Ctrl-C at the terminal that ended COMMAND reached its group alone;
     * before COMMAND had a group of its own it reached our whole job too (a
     * script that runs hilock, the rest of a pipeline). So that it still
     * does, once the lock is given back, see main. */
    if (take_terminal(c) && WIFSIGNALED(st) && WTERMSIG(st) == SIGINT && c->passed_sig != SIGINT &&
        sigint_wanted())
        c->reraise = SIGINT;
    if (c->verbose) {
        if (WIFSIGNALED(st)) fprintf(stderr, "hilock: COMMAND killed by signal %d\n", WTERMSIG(st));
        else fprintf(stderr, "hilock: COMMAND exited with %d\n", WEXITSTATUS(st));
    }
    if (c->lost) check_gone(c);
    else finish(c, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
}

/* SIGCHLD: COMMAND stopped, continued or ended, or an orphan of its (we are
 * their subreaper) ended and is reaped here. */
static void on_child(cli *c) {
    pid_t pid;
    int st;

    while ((pid = waitpid(-1, &st, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
        if (pid != c->child || c->state != ST_RUNNING || c->reaped) continue;
        if (WIFSTOPPED(st)) command_stopped(c, WSTOPSIG(st));
        else if (WIFCONTINUED(st)) c->stopped = 0;
        else command_ended(c, st);
    }
    if (c->lost) check_gone(c);
}

static void on_signal(evutil_socket_t fd, short what, void *arg) {
    cli *c = arg;
    int sig = (int)fd; /* libevent passes the signal number as the fd */
    int running = c->state == ST_RUNNING && !c->reaped;

    (void)what;
    if (sig == SIGCHLD) {
        on_child(c);
    } else if (sig == SIGCONT) {
        continue_command(c);
    } else if (sig == SIGTSTP) {
        /* COMMAND stops first; we follow when it has (command_stopped).
         * Without COMMAND, we stop as if we did not catch it. */
        if (running) {
            c->tstp_passed = 1;
            killpg(c->child, SIGTSTP);
        } else {
            stop_like(SIGTSTP, 0);
        }
    } else if (c->state == ST_WAITING && c->stop_sig == 0) {
        /* Stop waiting. on_acquired then runs with HILOCK_ECANCELED, or
         * with the lock if the grant was already on its way (we give it
         * back); a cancel never leaves the lock behind in Redis. */
        if (c->verbose) fprintf(stderr, "hilock: signal %d, giving up on %s\n", sig, c->name);
        c->stop_sig = sig;
        if (c->wait != NULL) hilock_wait_cancel(c->wait);
        if (c->mwait != NULL) hilock_multi_cancel(c->mwait);
    } else if (c->state == ST_RUNNING) {
        /* COMMAND decides; we hold the lock until it exits. A ^C typed at
         * a terminal goes to COMMAND's group alone, the terminal's
         * foreground; this is a signal sent to hilock (kill, timeout(1), a
         * service manager), which must not be lost. A stopped COMMAND is
         * continued to see it. */
        c->passed_sig = sig;
        killpg(c->child, sig);
        if (c->stopped) killpg(c->child, SIGCONT);
    }
}

/* ---- unlock NAME ---------------------------------------------------------- */

/* The outcome goes to stdout: it is what was asked for, and an on-call
 * script may want it without the warning. Either outcome is a success:
 * NAME is free now, which is what the caller wants to be true.
 *
 * The warning says what breaking a lock cannot do: the holder is not told,
 * and goes on until its next renewal finds the key gone. Only a lock that
 * was removed had a holder to warn about; one that was not held had none,
 * and a warning there would send an operator after a holder that does not
 * exist. The break is one atomic script, so it is said after, not before. */
static void on_broken(int status, uint64_t fence, void *arg) {
    cli *c = arg;

    if (status == 0 && fence > 0) {
        fprintf(stderr, "hilock: warning: forced %s open; its holder, if alive, keeps acting as "
                        "the owner until its next renewal fails\n", c->name);
        printf("hilock: removed the lock %s (fence %" PRIu64 ")\n", c->name, fence);
    } else if (status == 0) {
        printf("hilock: %s was not held\n", c->name);
    } else {
        report(c, "cannot unlock", status);
    }
    finish(c, status == 0 ? 0 : exit_for_error(status));
}

static int start_unlock(cli *c) {
    int rc;

    rc = hilock_break(c->client, c->name, on_broken, c);
    if (rc != 0) {
        fprintf(stderr, "hilock: cannot unlock %s: %s\n", c->name, hilock_strerror(rc));
        return rc == HILOCK_EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    return 0;
}

/* ---- revoke NAME ---------------------------------------------------------- */

static int is_redlock(const char *url) {
    return strncmp(url, "redlock://", 10) == 0 || strncmp(url, "redlocks://", 11) == 0;
}

/* As unlock's: the outcome on stdout, and either one a success (the holder
 * was asked, or there was none to ask). */
static void on_revoked(int status, uint64_t fence, void *arg) {
    cli *c = arg;

    if (status == 0 && fence > 0)
        printf("hilock: asked the holder of %s (fence %" PRIu64 ") to release it\n", c->name, fence);
    else if (status == 0)
        printf("hilock: %s was not held\n", c->name);
    else
        report(c, "cannot revoke", status);
    finish(c, status == 0 ? 0 : exit_for_error(status));
}

static int start_revoke(cli *c, const char *url) {
    int rc;

    if (is_redlock(url)) return usage_error("revoke does not work over Redlock (a redlock:// URL)");
    rc = hilock_revoke(c->client, c->name, on_revoked, c);
    if (rc != 0) {
        fprintf(stderr, "hilock: cannot revoke %s: %s\n", c->name, hilock_strerror(rc));
        return rc == HILOCK_EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    return 0;
}

/* ---- leader NAME, observe NAME ---------------------------------------------- */

/* "EPOCH VALUE", or "0" when nobody leads. */
static void print_leader(uint64_t epoch, const char *value, size_t len) {
    if (epoch == 0) printf("0\n");
    else printf("%" PRIu64 " %.*s\n", epoch, (int)len, value);
    fflush(stdout);
}

static void on_leader_read(int status, uint64_t epoch, const char *value, size_t len, void *arg) {
    cli *c = arg;

    if (status != 0) {
        report(c, "cannot read the leader of", status);
        finish(c, exit_for_error(status));
        return;
    }
    if (epoch != 0) print_leader(epoch, value, len);
    else if (c->verbose) fprintf(stderr, "hilock: nobody leads %s\n", c->name);
    finish(c, epoch != 0 ? 0 : 1);
}

static void on_leader_change(int status, uint64_t epoch, const char *value, size_t len, void *arg) {
    cli *c = arg;

    if (status == HILOCK_ECANCELED) return; /* our own close */
    if (status != 0) {
        report(c, "cannot observe", status);
        finish(c, exit_for_error(status));
        return;
    }
    print_leader(epoch, value, len);
}

static int start_read(cli *c, const char *url, int observe) {
    int rc;

    if (is_redlock(url)) return usage_error("%s does not work over Redlock (a redlock:// URL)",
                                            observe ? "observe" : "leader");
    rc = observe ? hilock_observe(c->client, c->name, on_leader_change, c, &c->observer)
                 : hilock_leader(c->client, c->name, on_leader_read, c);
    if (rc != 0) {
        fprintf(stderr, "hilock: cannot %s %s: %s\n", observe ? "observe" : "read the leader of",
                c->name, hilock_strerror(rc));
        return rc == HILOCK_EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    return 0;
}

/* ---- NAME -- COMMAND ------------------------------------------------------ */

/* Catch the stop signals (and SIGCHLD) on the loop; see must_catch. */
static int catch_signals(cli *c) {
    size_t i;

    for (i = 0; i < NCAUGHT; i++) {
        if (!must_catch(i)) continue;
        c->sigev[i] = evsignal_new(c->base, caught[i], on_signal, c);
        if (c->sigev[i] == NULL || event_add(c->sigev[i], NULL) != 0) {
            fprintf(stderr, "hilock: cannot catch signal %d\n", caught[i]);
            return EX_OSERR;
        }
    }
    return 0;
}

/* -v says "waiting" as soon as the request is out, not once the lock is
 * seen held: the library does not report that, and a grant needs at least
 * the connect and one round trip, so it never comes within this loop turn
 * anyway. Any delay before saying it would make -v's output depend on
 * timing; this way a log always reads waiting, then acquired or busy. */
static void say_waiting(const cli *c, long long wait_ms) {
    if (wait_ms == 0) fprintf(stderr, "hilock: trying %s once\n", c->name);
    else if (wait_ms == HILOCK_WAIT_FOREVER) fprintf(stderr, "hilock: waiting for %s\n", c->name);
    else fprintf(stderr, "hilock: waiting for %s, up to %lld ms\n", c->name, wait_ms);
}

/* -n, -s, -x or -f, as given; 0 for the mutex. */
static char mode_option(const cli *c) {
    return c->permits_total > 0 ? 'n' : c->mode;
}

/* Whether url is Redlock's (redlock:// or redlocks://), which serves the
 * mutex only: the library refuses the other primitives there. */
static int start_lock(cli *c, const char *url, long long wait_ms, long long lease_ms) {
    hilock_acquire_opts opts;
    int rc;

    if (c->revoke_sig != 0 && mode_option(c) != 0)
        return usage_error("--on-revoke is for the mutex only, not -%c", mode_option(c));
    if (c->revoke_sig != 0 && is_redlock(url))
        return usage_error("--on-revoke does not work over Redlock (a redlock:// URL)");
    if ((rc = catch_signals(c)) != 0) return rc;
    hilock_acquire_opts_init(&opts);
    opts.wait_ms = wait_ms;
    opts.lease_ms = (uint32_t)lease_ms;
    opts.lost_cb = on_lost;
    opts.lost_data = c;
    if (c->mode == 'e')
        rc = hilock_campaign(c->client, c->name, c->value ? c->value : "", &opts, on_acquired, c, &c->wait);
    else if (c->permits_total > 0)
        rc = hilock_semaphore_acquire(c->client, c->name, c->permits_total, 1, &opts, on_acquired, c,
                                      &c->wait);
    else if (c->mode == 's')
        rc = hilock_read_acquire(c->client, c->name, &opts, on_acquired, c, &c->wait);
    else if (c->mode == 'x')
        rc = hilock_write_acquire(c->client, c->name, &opts, on_acquired, c, &c->wait);
    else if (c->mode == 'f')
        rc = hilock_fair_acquire(c->client, c->name, &opts, on_acquired, c, &c->wait);
    else if (c->nmulti > 0)
        rc = hilock_acquire_multi(c->client, c->multi, c->nmulti, &opts, on_acquired, c, &c->mwait);
    else
        rc = hilock_acquire(c->client, c->name, &opts, on_acquired, c, &c->wait);
    if (rc == HILOCK_EINVAL && c->mode == 'e' && is_redlock(url))
        return usage_error("elect does not work over Redlock (a redlock:// URL)");
    if (rc == HILOCK_EINVAL && mode_option(c) != 0 && is_redlock(url))
        return usage_error("-%c does not work over Redlock (a redlock:// URL): only the plain "
                           "mutex does", mode_option(c));
    if (rc != 0) {
        fprintf(stderr, "hilock: cannot lock %s: %s\n", c->name, hilock_strerror(rc));
        return rc == HILOCK_EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    if (c->verbose) say_waiting(c, wait_ms);
    return 0;
}

/* ---- The command line ------------------------------------------------------
 *
 * Three forms: NAME -- COMMAND, `unlock NAME` and `inspect NAME...`. The
 * options of a subcommand go before its name or after it, with the same
 * meaning, so that `hilock -u URL unlock NAME` and `hilock unlock -u URL
 * NAME` are one command. Each option is read knowing the form (see
 * find_form): one that the form does not take is refused by name, and -h
 * shows the form's help. After a subcommand's name, options may follow its
 * operands too (GNU getopt permutes them); those of NAME -- COMMAND end at
 * NAME, since what follows -- is COMMAND's. */

enum { FORM_LOCK = 1, FORM_UNLOCK = 2, FORM_INSPECT = 4, FORM_REVOKE = 8, FORM_ELECT = 16,
       FORM_LEADER = 32, FORM_OBSERVE = 64 };

#define SHORTOPTS ":hVu:w:l:p:E:n:svxfm:" /* ':' first: our own messages */

static const struct option longopts[] = {
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    TLS_LONGOPTS,
    { "starve", required_argument, NULL, OPT_STARVE },
    { "kill-after", required_argument, NULL, OPT_KILL_AFTER },
    { "json", no_argument, NULL, OPT_JSON },
    { "scan", required_argument, NULL, OPT_SCAN },
    { "on-revoke", required_argument, NULL, OPT_ON_REVOKE },
    { "value", required_argument, NULL, OPT_VALUE },
    { NULL, 0, NULL, 0 },
};

/* The options that some forms only take; the others (-u, -p, the TLS
 * options, -h, -V) every form takes. */
static const struct scope {
    int opt;
    const char *name;
    int forms;
} scopes[] = {
    { 'w', "-w", FORM_LOCK | FORM_ELECT }, { 'l', "-l", FORM_LOCK | FORM_ELECT },
    { 'E', "-E", FORM_LOCK | FORM_ELECT },
    { 'n', "-n", FORM_LOCK }, { 's', "-s", FORM_LOCK }, { 'x', "-x", FORM_LOCK }, { 'f', "-f", FORM_LOCK },
    { OPT_STARVE, "--starve", FORM_LOCK }, { OPT_KILL_AFTER, "--kill-after", FORM_LOCK | FORM_ELECT },
    { 'v', "-v", FORM_LOCK | FORM_UNLOCK | FORM_REVOKE | FORM_ELECT | FORM_LEADER | FORM_OBSERVE },
    { OPT_ON_REVOKE, "--on-revoke", FORM_LOCK }, { OPT_VALUE, "--value", FORM_ELECT },
    { 'm', "-m", FORM_LOCK },
    { OPT_JSON, "--json", FORM_INSPECT }, { OPT_SCAN, "--scan", FORM_INSPECT },
};

/* What the command line asks for, beyond what the callbacks need (cli). */
typedef struct args {
    int form;               /* FORM_* */
    const char *url;
    int url_from_env;       /* url is $HILOCK_URL's, for the message of a bad one */
    const char *prefix;
    hilock_config tls;      /* its tls_* fields: --cacert... (tlsopt.h) */
    long long wait_ms;
    long long lease_ms;
    uint32_t starve_ms;     /* --starve or $HILOCK_STARVE; 0: the library's default */
    int starve_given;       /* --starve given: $HILOCK_STARVE is not read */
    const char *mode_opt;   /* "-n", "-s", "-x" or "-f" as given first, or NULL */
    int json;               /* inspect --json */
    const char *scan;       /* inspect --scan PATTERN, or NULL */
    char **names;           /* inspect's NAMEs */
    int nnames;
} args;

static const char *form_name(int form) {
    return form == FORM_UNLOCK ? "unlock" : form == FORM_REVOKE ? "revoke"
           : form == FORM_INSPECT ? "inspect" : form == FORM_ELECT ? "elect"
           : form == FORM_LEADER ? "leader" : form == FORM_OBSERVE ? "observe" : "NAME -- COMMAND";
}

/* Where the operands begin in argv: getopt_long's own walk over the
 * options, silent (the real reading, with the messages, comes once the
 * form is known). glibc starts afresh at optind 0. */
static int first_operand(int argc, char **argv, int *multi) {
    int opt;

    optind = 0;
    opterr = 0;
    *multi = 0;
    while ((opt = getopt_long(argc, argv, "+" SHORTOPTS, longopts, NULL)) != -1) *multi |= opt == 'm';
    return optind;
}

/* The form, from the first operand (k): a subcommand's name, unless --
 * follows it, as in `hilock unlock -- COMMAND`, which has always meant a
 * lock named "unlock". */
static int find_form(int argc, char **argv, int k) {
    if (k >= argc || (k + 1 < argc && strcmp(argv[k + 1], "--") == 0)) return FORM_LOCK;
    if (strcmp(argv[k], "unlock") == 0) return FORM_UNLOCK;
    if (strcmp(argv[k], "revoke") == 0) return FORM_REVOKE;
    if (strcmp(argv[k], "elect") == 0) return FORM_ELECT;
    if (strcmp(argv[k], "leader") == 0) return FORM_LEADER;
    if (strcmp(argv[k], "observe") == 0) return FORM_OBSERVE;
    if (strcmp(argv[k], "inspect") == 0) return FORM_INSPECT;
    return FORM_LOCK;
}

/* -1 if the form takes opt, else the usage status, after naming both. */
static int check_scope(const args *a, int opt) {
    size_t i;

    for (i = 0; i < sizeof(scopes) / sizeof(scopes[0]); i++) {
        if (scopes[i].opt != opt || (scopes[i].forms & a->form)) continue;
        return usage_error("%s does not apply to %s%s", scopes[i].name, form_name(a->form),
                           scopes[i].forms == FORM_INSPECT ? " (only to inspect)" : "");
    }
    return -1;
}

/* "--NAME" of a long option's val, into buf. */
static const char *long_name(int val, char *buf, size_t n) {
    const struct option *o;

    for (o = longopts; o->name != NULL && o->val != val; o++) {}
    snprintf(buf, n, "--%s", o->name != NULL ? o->name : "?");
    return buf;
}

/* A long option getopt_long refused (`given` without its "--"): unknown,
 * the start of several, or given a value it does not take. */
static int long_option_error(const char *given) {
    size_t len = strcspn(given, "="), i, n = 0;
    const struct option *o, *hit = NULL;
    char some[256] = "";

    for (o = longopts; o->name != NULL && len > 0; o++) {
        if (strncmp(o->name, given, len) != 0) continue;
        if (strlen(o->name) == len) { hit = o; n = 1; break; }
        hit = o;
        n++;
    }
    if (n == 0) return usage_error("unknown option --%.*s", (int)len, given);
    if (n == 1) return usage_error("option --%s takes no value", hit->name);
    for (o = longopts, i = 0; o->name != NULL; o++) {
        if (strncmp(o->name, given, len) != 0) continue;
        i++;
        snprintf(some + strlen(some), sizeof(some) - strlen(some), "%s--%s",
                 i == 1 ? "" : i == n ? " or " : ", ", o->name);
    }
    return usage_error("ambiguous option --%.*s: %s?", (int)len, given, some);
}

/* getopt_long's ':' or '?' for the option that ends at argv[optind - 1].
 * A long one has optopt 0 (unknown, ambiguous) or its val (a value it does
 * not take, or lacks); the vals of ours are above the characters, but for
 * --help and --version, whose only fault can be a value. */
static int option_error(int opt, char **argv) {
    const char *given = argv[optind - 1];
    char buf[64];

    if (opt == ':' && optopt >= 256)
        return usage_error("option %s needs a value", long_name(optopt, buf, sizeof(buf)));
    if (opt == ':') return usage_error("option -%c needs a value", optopt);
    if (optopt == 0 || optopt >= 256 || (strncmp(given, "--", 2) == 0 && strchr(given, '=') != NULL))
        return long_option_error(given + 2);
    return usage_error("unknown option -%c", optopt);
}

static int check_name(const char *name) {
    if (*name == '\0') return usage_error("empty lock NAME");
    if (strlen(name) > HILOCK_NAME_MAX)
        return usage_error("lock NAME of %zu bytes is too long: at most %d", strlen(name), HILOCK_NAME_MAX);
    return -1;
}

/* The library's rule (no braces, at most HILOCK_PREFIX_MAX bytes), checked
 * here to say which part of it PREFIX breaks. */
static int check_prefix(const char *prefix) {
    if (strpbrk(prefix, "{}") != NULL)
        return usage_error("bad -p PREFIX '%s': braces are not allowed (the keys put NAME "
                           "between braces, as their Redis Cluster hash tag)", prefix);
    if (strlen(prefix) > HILOCK_PREFIX_MAX)
        return usage_error("bad -p PREFIX of %zu bytes: too long, at most %d", strlen(prefix),
                           HILOCK_PREFIX_MAX);
    return -1;
}

/* The MS of --starve MS or of $HILOCK_STARVE (from: which, for the message):
 * milliseconds, or "off" never to hand the lock over. The top is -l's: a
 * wait of 24 days is as good as never, and "off" says that plainly. Returns
 * -1 to go on, or the usage status. */
static int parse_starve(const char *from, const char *s, uint32_t *out) {
    const char *why;
    long long ms;

    if (strcmp(s, "off") == 0) {
        *out = HILOCK_STARVE_NEVER;
        return -1;
    }
    if ((why = parse_num(s, 1, INT32_MAX, &ms)) != NULL)
        return usage_error("bad %s '%s': %s; want milliseconds, 1 to %d, or off", from, s, why, INT32_MAX);
    *out = (uint32_t)ms;
    return -1;
}

/* --on-revoke SIGNAL: a name (TERM, SIGTERM, usr1...) or a number. Returns
 * -1 to go on, or the usage status. */
static int parse_signal(const char *s, int *out) {
    static const struct { const char *name; int sig; } sigs[] = {
        { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "TERM", SIGTERM },
        { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "ALRM", SIGALRM }, { "KILL", SIGKILL },
        { "WINCH", SIGWINCH }, { "CONT", SIGCONT },
    };
    const char *name = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
    long long n;
    size_t i;

    for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (strcasecmp(name, sigs[i].name) == 0) {
            *out = sigs[i].sig;
            return -1;
        }
    if (parse_num(s, 1, NSIG - 1, &n) != NULL)
        return usage_error("bad --on-revoke SIGNAL '%s': want a signal's name (HUP, INT, QUIT, TERM, "
                           "USR1, USR2, ALRM, KILL, WINCH, CONT) or number, 1 to %d", s, NSIG - 1);
    *out = (int)n;
    return -1;
}

/* -n N, -s, -x, -f: which primitive of NAME. One of them, as often as
 * wanted (the last -n's N counts). */
static int take_mode(cli *c, args *a, int opt, const char *v) {
    const char *given = opt == 'n' ? "-n" : opt == 's' ? "-s" : opt == 'x' ? "-x" : "-f";
    const char *why;
    long long n;

    if (a->mode_opt != NULL && strcmp(a->mode_opt, given) != 0)
        return usage_error("%s and %s exclude each other: give one of -n, -s, -x and -f", a->mode_opt, given);
    a->mode_opt = given;
    if (opt != 'n') {
        c->mode = (char)opt;
        return -1;
    }
    if ((why = parse_num(v, 1, HILOCK_PERMITS_MAX, &n)) != NULL)
        return usage_error("bad -n N '%s': %s; want a number of permits, 1 to %u", v, why, HILOCK_PERMITS_MAX);
    c->permits_total = (unsigned)n;
    return -1;
}

/* The options with a number: -w, -l, -E, --kill-after, --starve. */
static int take_number(cli *c, args *a, int opt, const char *v) {
    const char *why = NULL;
    long long code;
    int rc;

    switch (opt) {
    case 'w':
        if ((why = parse_num(v, 0, LLONG_MAX, &a->wait_ms)) != NULL)
            return usage_error("bad -w WAIT_MS '%s': %s; want milliseconds, 0 to %lld (0: try once)",
                               v, why, LLONG_MAX);
        return -1;
    case 'l':
        if ((why = parse_num(v, HILOCK_LEASE_MIN, INT32_MAX, &a->lease_ms)) != NULL)
            return usage_error("bad -l LEASE_MS '%s': %s; want milliseconds, %u to %d", v, why,
                               HILOCK_LEASE_MIN, INT32_MAX);
        return -1;
    case 'E':
        /* 0 would make "busy" look like success. */
        if ((why = parse_num(v, 1, 255, &code)) != NULL)
            return usage_error("bad -E CODE '%s': %s; want an exit status, 1 to 255 (0 would read as "
                               "success)", v, why);
        c->busy_status = (int)code;
        return -1;
    case OPT_KILL_AFTER:
        if ((why = parse_num(v, 0, INT32_MAX, &c->kill_after)) != NULL)
            return usage_error("bad --kill-after MS '%s': %s; want milliseconds, 0 to %d "
                               "(0: SIGKILL at once)", v, why, INT32_MAX);
        return -1;
    default: /* OPT_STARVE */
        if ((rc = parse_starve("--starve MS", v, &a->starve_ms)) >= 0) return rc;
        a->starve_given = 1;
        return -1;
    }
}

/* One option, of those the form takes. Returns -1 to go on, or the status
 * to exit with at once (-h, -V, a usage error). */
static int take_option(cli *c, args *a, int opt, char **argv) {
    int rc;

    if (opt == ':' || opt == '?') return option_error(opt, argv);
    if ((rc = check_scope(a, opt)) >= 0) return rc;
    if (tls_option(&a->tls, opt, optarg)) return -1;
    switch (opt) {
    case 'h': fputs(a->form == FORM_INSPECT ? inspect_usage : usage_text, stdout); return 0;
    case 'V': print_version(); return 0;
    case 'u': a->url = optarg; a->url_from_env = 0; return -1;
    case 'p': a->prefix = optarg; return check_prefix(optarg);
    case 'v': c->verbose = 1; return -1;
    case OPT_JSON: a->json = 1; return -1;
    case OPT_SCAN: a->scan = optarg; return -1;
    case OPT_ON_REVOKE: return parse_signal(optarg, &c->revoke_sig);
    case OPT_VALUE:
        if (strlen(optarg) > HILOCK_VALUE_MAX)
            return usage_error("--value V of %zu bytes is too long: at most %d", strlen(optarg), HILOCK_VALUE_MAX);
        c->value = optarg;
        return -1;
    case 'n': case 's': case 'x': case 'f': return take_mode(c, a, opt, optarg);
    case 'm':
        if (c->nmulti == HILOCK_MULTI_MAX) return usage_error("more than %d -m NAMEs", HILOCK_MULTI_MAX);
        for (size_t i = 0; i < c->nmulti; i++)
            if (strcmp(c->multi[i], optarg) == 0) return usage_error("-m NAME '%s' given twice", optarg);
        c->multi[c->nmulti++] = optarg;
        return check_name(optarg);
    default: return take_number(c, a, opt, optarg);
    }
}

/* Read the options of argv[1..argc-1]: up to the first operand, or past
 * the operands too (permute). *ended: the options ended at a -- of their
 * own, which argv[optind - 1] then is (not the value of an option, as in
 * `-p --`). Returns -1 to go on, or the status to exit with. */
static int read_options(cli *c, args *a, int argc, char **argv, int permute, int *ended) {
    const char *last = NULL;
    int opt, rc;

    optind = 0; /* glibc: start afresh, with this argv and mode */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, permute ? SHORTOPTS : "+" SHORTOPTS, longopts, NULL)) != -1) {
        if ((rc = take_option(c, a, opt, argv)) >= 0) return rc;
        last = optarg;
    }
    *ended = optind > 1 && strcmp(argv[optind - 1], "--") == 0 && argv[optind - 1] != last;
    return -1;
}

/* A word between NAME and --: an option in the wrong place, or a NAME
 * that was meant to be one word. */
static int extra_before_dashdash(const char *word) {
    if (word[0] == '-' && word[1] != '\0')
        return usage_error("option %s after NAME: options go before NAME", word);
    return usage_error("extra operand '%s' between NAME and --: NAME is one argument (quote it)", word);
}

/* NAME -- COMMAND [ARG...] in v[0..n-1]. ended: the options ended at a --
 * of their own: with no other -- after it, that was the one before
 * COMMAND, and NAME is what is missing (`hilock -u URL -- true`). */
static int lock_operands(cli *c, int n, char **v, int ended) {
    int sep, rc;

    for (sep = 0; sep < n && strcmp(v[sep], "--") != 0; sep++) {}
    if (sep == n) sep = -1;
    if (sep == 0 || (ended && sep < 0))
        return usage_error(n == 0 ? "missing NAME before -- and COMMAND after it" : "missing NAME before --");
    if (n == 0) return usage_error("missing NAME, -- and COMMAND");
    c->name = v[0];
    if ((rc = check_name(c->name)) >= 0) return rc;
    if (n == 1) return usage_error("missing -- and COMMAND after NAME");
    if (sep < 0) return usage_error("missing -- between NAME and COMMAND");
    if (sep > 1) return extra_before_dashdash(v[1]);
    if (n == 2) return usage_error("missing COMMAND after --");
    c->cmd = v + 2;
    return -1;
}

/* -- COMMAND [ARG...] in v[0..n-1] after -m NAME...: no NAME operand, the
 * mutexes only. c->name says them all, for the messages. */
static int multi_operands(cli *c, const args *a, int n, char **v, int ended) {
    static char names[512];
    size_t i, len = 0;

    if (a->mode_opt != NULL) return usage_error("-m and %s exclude each other: -m NAME takes mutexes", a->mode_opt);
    if (c->revoke_sig != 0) return usage_error("--on-revoke is for a lock of one NAME, not -m");
    if (!ended && n > 0 && strcmp(v[0], "--") != 0)
        return usage_error("NAME '%s' beside -m: give every name with -m NAME", v[0]);
    if (!ended) return usage_error("missing -- and COMMAND after the -m NAMEs");
    if (n == 0) return usage_error("missing COMMAND after --");
    for (i = 0; i < c->nmulti && len + 8 < sizeof(names); i++)
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%.*s", i ? ", " : "",
                                (int)(sizeof(names) - len - 6), c->multi[i]);
    if (i < c->nmulti) snprintf(names + sizeof(names) - 4, 4, "...");
    c->name = names;
    c->cmd = v;
    return -1;
}

/* unlock's or revoke's (`what`) NAME, alone, in v[0..n-1]. */
static int name_operand(cli *c, const char *what, int n, char **v) {
    if (n == 0) return usage_error("missing NAME after %s", what);
    if (n > 1) return usage_error("extra operand '%s' after %s NAME: %s takes one NAME", v[1], what, what);
    c->name = v[0];
    return check_name(c->name);
}

/* inspect's NAMEs, or none with --scan PATTERN, in v[0..n-1]. */
static int inspect_operands(args *a, int n, char **v) {
    int i, rc;

    if (a->scan != NULL && n > 0)
        return usage_error("--scan PATTERN takes no NAME, but '%s' follows", v[0]);
    if (a->scan == NULL && n == 0) return usage_error("missing NAME (or --scan PATTERN) after inspect");
    for (i = 0; i < n; i++)
        if ((rc = check_name(v[i])) >= 0) return rc;
    a->names = v;
    a->nnames = n;
    return -1;
}

/* A client certificate without its key, or a key without its certificate:
 * say which is missing (each may come from the option or the variable). */
static int check_cert_pair(const args *a) {
    if (a->tls.tls_cert_file != NULL && a->tls.tls_key_file == NULL)
        return usage_error("--cert and --key go together: --key FILE (or $HILOCK_KEY) is missing");
    if (a->tls.tls_cert_file == NULL && a->tls.tls_key_file != NULL)
        return usage_error("--cert and --key go together: --cert FILE (or $HILOCK_CERT) is missing");
    return -1;
}

/* The options and operands of a subcommand whose name is argv[k]: those
 * before it, then those after it (and after its operands). */
static int parse_subcommand(cli *c, args *a, int argc, char **argv, int k) {
    int rc, ended, n;
    char **v;

    if ((rc = read_options(c, a, k, argv, 0, &ended)) >= 0) return rc;
    if ((rc = read_options(c, a, argc - k, argv + k, 1, &ended)) >= 0) return rc;
    if ((rc = check_cert_pair(a)) >= 0) return rc;
    n = argc - k - optind;
    v = argv + k + optind;
    if (a->form == FORM_INSPECT) return inspect_operands(a, n, v);
    return name_operand(c, form_name(a->form), n, v);
}

/* elect: the lock form's options before `elect` and after it, and the
 * election's after NAME too, up to -- (`hilock elect NAME --value V --
 * COMMAND`). argv[k] is "elect". */
static int parse_elect(cli *c, args *a, int argc, char **argv, int k) {
    int rc, ended, n, at;
    char **v;

    c->mode = 'e';
    if ((rc = read_options(c, a, k, argv, 0, &ended)) >= 0) return rc;
    if ((rc = read_options(c, a, argc - k, argv + k, 0, &ended)) >= 0) return rc;
    n = argc - k - optind;
    v = argv + k + optind;
    if (ended || n < 2 || strcmp(v[1], "--") == 0) {
        if ((rc = check_cert_pair(a)) >= 0) return rc;
        return lock_operands(c, n, v, ended);
    }
    /* Options between NAME (v[0]) and --. */
    if ((rc = read_options(c, a, n, v, 0, &ended)) >= 0) return rc;
    if ((rc = check_cert_pair(a)) >= 0) return rc;
    if (!ended) return lock_operands(c, n, v, 0); /* says what is wrong */
    at = optind;
    c->name = v[0];
    if ((rc = check_name(c->name)) >= 0) return rc;
    if (at >= n) return usage_error("missing COMMAND after --");
    c->cmd = v + at;
    return -1;
}

/* Fill c and a from the command line. Returns -1 to go on, or the status
 * to exit with at once (-h, -V, a usage error). */
static int parse_args(cli *c, args *a, int argc, char **argv) {
    const char *env_starve;
    int multi, k = first_operand(argc, argv, &multi), rc, ended;

    /* With -m NAME, what follows -- is COMMAND: `hilock -m a -- unlock` runs unlock. */
    a->form = multi ? FORM_LOCK : find_form(argc, argv, k);
    if (a->form == FORM_INSPECT) help_cmd = "hilock inspect --help";
    if (a->form == FORM_ELECT) return parse_elect(c, a, argc, argv, k);
    if (a->form != FORM_LOCK) return parse_subcommand(c, a, argc, argv, k);
    if ((rc = read_options(c, a, argc, argv, 0, &ended)) >= 0) return rc;
    if ((rc = check_cert_pair(a)) >= 0) return rc;
    rc = c->nmulti ? multi_operands(c, a, argc - optind, argv + optind, ended)
                   : lock_operands(c, argc - optind, argv + optind, ended);
    if (rc >= 0) return rc;
    /* The environment's default, read only where it would be used: a bad
     * one must not stop an unlock or an inspect, which never wait, nor a
     * --starve that overrides it. An empty variable is unset, as
     * $HILOCK_URL. */
    env_starve = getenv("HILOCK_STARVE");
    if (!a->starve_given && env_starve != NULL && *env_starve != '\0')
        return parse_starve("$HILOCK_STARVE", env_starve, &a->starve_ms);
    return -1;
}

/* ---- main ---------------------------------------------------------------- */

/* The URL, prefix and TLS settings of a: the client's, and inspect's. */
static void config_of(const args *a, hilock_config *cfg) {
    hilock_config_init(cfg);
    cfg->url = a->url;
    cfg->prefix = a->prefix;
    cfg->tls_ca_file = a->tls.tls_ca_file;
    cfg->tls_ca_dir = a->tls.tls_ca_dir;
    cfg->tls_cert_file = a->tls.tls_cert_file;
    cfg->tls_key_file = a->tls.tls_key_file;
    cfg->tls_server_name = a->tls.tls_server_name;
    cfg->tls_insecure = a->tls.tls_insecure;
}

static int run_inspect(const args *a) {
    inspect_args in;

    memset(&in, 0, sizeof(in));
    config_of(a, &in.cfg);
    in.url_from_env = a->url_from_env;
    in.json = a->json;
    in.scan = a->scan;
    in.names = a->names;
    in.nnames = a->nnames;
    return inspect_run(&in);
}

/* The event loop and the client. Returns 0, or the status to exit with. */
static int open_client(cli *c, const args *a) {
    hilock_loop loop;
    hilock_config cfg;
    char shown[4096];
    int rc;

    c->base = event_base_new();
    if (c->base == NULL) {
        fprintf(stderr, "hilock: cannot create the event loop\n");
        return EX_OSERR;
    }
    hilock_libevent_init(&loop, c->base);
    config_of(a, &cfg);
    cfg.default_lease_ms = (uint32_t)a->lease_ms;
    cfg.starve_ms = a->starve_ms;
    cfg.log_cb = on_log;
    cfg.log_data = c;
    rc = hilock_client_new(&c->client, &cfg, &loop);
    if (rc != 0) {
        c->client = NULL;
        if (rc == HILOCK_EURL)
            return usage_error("bad Redis URL '%s'%s: %s", url_shown(a->url, shown, sizeof(shown)),
                               a->url_from_env ? " (from $HILOCK_URL)" : "", url_why(a->url));
        /* The prefix and the lease were checked when read: nothing of the
         * command line is left for the library to refuse. */
        if (rc == HILOCK_EINVAL) return usage_error("the library refused the settings: %s", hilock_strerror(rc));
        if (rc == HILOCK_ETLS) {
            /* Not built in, or a file that cannot be loaded: say which. */
            if (!hilock_tls_available()) fprintf(stderr, "hilock: %s\n", hilock_strerror(rc));
            else fprintf(stderr, "hilock: TLS: cannot load --cacert, --capath, --cert or --key "
                         "(a file missing, not PEM, or a key not the certificate's)\n");
            return EX_UNAVAILABLE;
        }
        fprintf(stderr, "hilock: %s\n", hilock_strerror(rc));
        return EX_SOFTWARE;
    }
    if (c->verbose)
        fprintf(stderr, "hilock: connecting to %s\n", url_shown(a->url, shown, sizeof(shown)));
    return 0;
}

int main(int argc, char **argv) {
    const char *env_url = getenv("HILOCK_URL");
    args a;
    cli c;
    size_t i;
    int rc;

    memset(&c, 0, sizeof(c));
    memset(&a, 0, sizeof(a));
    c.busy_status = EX_TEMPFAIL;
    c.kill_after = DEFAULT_KILL_AFTER;
    c.tty = -1;
    a.url_from_env = env_url != NULL && *env_url;
    a.url = a.url_from_env ? env_url : DEFAULT_URL;
    a.prefix = DEFAULT_PREFIX;
    a.wait_ms = HILOCK_WAIT_FOREVER;
    a.lease_ms = DEFAULT_LEASE;
    hilock_config_init(&a.tls);
    tls_from_env(&a.tls);
    rc = parse_args(&c, &a, argc, argv);
    if (rc >= 0) return rc;
    if (a.form == FORM_INSPECT) return run_inspect(&a);

    /* Remember what COMMAND must inherit before we open or catch anything. */
    note_inherited_fds();
    sigprocmask(SIG_SETMASK, NULL, &saved_mask);
    for (i = 0; i < NCAUGHT; i++) sigaction(caught[i], NULL, &saved_act[i]);
    for (i = 0; i < NOWN; i++) {
        /* SIGPIPE: a write to a Redis connection that broke must fail, not
         * kill us. SIGTTIN, SIGTTOU: see own. */
        sigaction(own[i], NULL, &saved_act[NCAUGHT + i]);
        signal(own[i], SIG_IGN);
    }

    rc = open_client(&c, &a);
    if (rc == 0)
        rc = a.form == FORM_UNLOCK    ? start_unlock(&c)
             : a.form == FORM_REVOKE  ? start_revoke(&c, a.url)
             : a.form == FORM_LEADER  ? start_read(&c, a.url, 0)
             : a.form == FORM_OBSERVE ? start_read(&c, a.url, 1)
                                      : start_lock(&c, a.url, a.wait_ms, a.lease_ms);
    if (rc == 0) {
        c.status = EX_SOFTWARE; /* finish() sets the real one; a loop that ran dry is a bug */
        event_base_dispatch(c.base);
    } else {
        if (c.client != NULL) hilock_client_free(c.client);
        c.status = rc;
    }

    for (i = 0; i < NCAUGHT; i++)
        if (c.sigev[i] != NULL) event_free(c.sigev[i]);
    if (c.kill_timer != NULL) event_free(c.kill_timer);
    if (c.gone_timer != NULL) event_free(c.gone_timer);
    if (c.base != NULL) event_base_free(c.base);
    if (c.tty >= 0) close(c.tty);
    free(inherited_fds);
    if (c.reraise != 0 && c.status == 128 + c.reraise) {
        /* Ctrl-C ended COMMAND (command_ended): the lock is given back; now
         * our job gets the signal too, and we end by it, so that the shell
         * or script that ran us stops as it would have. */
        fflush(NULL);
        signal(c.reraise, SIG_DFL);
        killpg(getpgrp(), c.reraise);
    }
    return c.status;
}
