/* The suite's network: one namespace per host, each with a veth (eth0 in
 * the host) whose other end is on a Linux bridge (br0) in a namespace of
 * its own. Addresses are 10.77.<subnet>.<n>/24 and exist only inside these
 * namespaces. Faults are iptables rules inside a host's namespace; they go
 * with the namespace. Every name starts with "hln<runid>-", so a run's
 * leftovers can be found and removed by name (nem_net_sweep). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nemesis/nemesis.h"

static char log_path[256] = "/dev/null";

void nem_log_to(const char *path) { snprintf(log_path, sizeof(log_path), "%s", path); }

int nem_exec(const char *const *argv) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        if (in >= 0) dup2(in, 0);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int nem_execf(const char *fmt, ...) {
    char line[512];
    const char *argv[64];
    int a = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    for (char *save = NULL, *w = strtok_r(line, " ", &save); w && a < 63; w = strtok_r(NULL, " ", &save))
        argv[a++] = w;
    argv[a] = NULL;
    int rc = nem_exec(argv);
    if (rc != 0) {
        FILE *f = fopen(log_path, "a");
        if (f) {
            fprintf(f, "nemesis: exit %d: ", rc);
            for (int i = 0; i < a; i++) fprintf(f, "%s ", argv[i]);
            fprintf(f, "\n");
            fclose(f);
        }
    }
    return rc;
}

int nem_net_init(nem_net *n, const char *runid, int subnet) {
    memset(n, 0, sizeof(*n));
    snprintf(n->prefix, sizeof(n->prefix), "hln%s-", runid);
    n->subnet = subnet;
    snprintf(n->br, sizeof(n->br), "%sbr", n->prefix);
    if (nem_execf("ip netns add %s", n->br) != 0) return -1;
    n->up = 1;
    if (nem_execf("ip -n %s link add br0 type bridge", n->br) != 0 ||
        nem_execf("ip -n %s link set br0 up", n->br) != 0 ||
        nem_execf("ip -n %s link set lo up", n->br) != 0)
        return -1;
    return 0;
}

nem_host *nem_net_add(nem_net *n, const char *name, int octet) {
    if (n->nhosts == NEM_MAX_HOSTS) return NULL;
    nem_host *h = &n->host[n->nhosts];
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", name);
    char prefix[sizeof(n->prefix)];
    memcpy(prefix, n->prefix, sizeof(prefix));
    snprintf(h->ns, sizeof(h->ns), "%s%s", prefix, name);
    snprintf(h->ip, sizeof(h->ip), "10.77.%d.%d", n->subnet, octet);
    if (nem_execf("ip netns add %s", h->ns) != 0) return NULL;
    n->nhosts++;
    if (nem_execf("ip -n %s link add v-%s type veth peer name eth0 netns %s", n->br, name, h->ns) != 0 ||
        nem_execf("ip -n %s link set v-%s master br0", n->br, name) != 0 ||
        nem_execf("ip -n %s link set v-%s up", n->br, name) != 0 ||
        nem_execf("ip -n %s addr add %s/24 dev eth0", h->ns, h->ip) != 0 ||
        nem_execf("ip -n %s link set eth0 up", h->ns) != 0 ||
        nem_execf("ip -n %s link set lo up", h->ns) != 0)
        return NULL;
    return h;
}

nem_host *nem_net_host(nem_net *n, const char *name) {
    for (int i = 0; i < n->nhosts; i++)
        if (strcmp(n->host[i].name, name) == 0) return &n->host[i];
    return NULL;
}

void nem_net_down(nem_net *n) {
    for (int i = n->nhosts - 1; i >= 0; i--) nem_execf("ip netns del %s", n->host[i].ns);
    if (n->up) nem_execf("ip netns del %s", n->br);
    n->nhosts = 0;
    n->up = 0;
}

void nem_net_sweep(const char *prefix) {
    DIR *d = opendir("/var/run/netns");
    if (d == NULL) return;
    struct dirent *e;
    char names[64][64];
    int k = 0;
    while ((e = readdir(d)) != NULL && k < 64)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) snprintf(names[k++], sizeof(names[0]), "%.63s", e->d_name);
    closedir(d);
    for (int i = 0; i < k; i++) nem_execf("ip netns del %s", names[i]);
}

int nem_enter(const char *ns) {
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc;
}

pid_t nem_fork_into(const char *ns) {
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1); /* the controller died before the line above */
    signal(SIGTERM, SIG_DFL);
    if (ns != NULL && nem_enter(ns) != 0) _exit(1);
    return 0;
}

int nem_ipt(nem_host *h, const char *fmt, ...) {
    char rule[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    h->cut = 1;
    return nem_execf("ip netns exec %s iptables -w %s", h->ns, rule);
}

void nem_heal_net(nem_net *n) {
    for (int i = 0; i < n->nhosts; i++) {
        nem_host *h = &n->host[i];
        if (!h->cut) continue;
        nem_execf("ip netns exec %s iptables -w -F", h->ns);
        h->cut = 0;
    }
}
