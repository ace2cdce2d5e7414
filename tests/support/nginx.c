/* Test harness for the nginx module: see nginx.h. */
#include "support/nginx.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/harness.h"

/* ---- nginx ---------------------------------------------------------------- */

const char *test_nginx_module(void) {
    static char path[512];
    const char *p = test_build_path("HILOCK_NGINX_MODULE", "nginx/ngx_http_hilock_module.so", path, sizeof(path));
    return p ? p : "";
}

static const char *nginx_bin(void) {
    const char *env = getenv("HILOCK_NGINX");
    if (env != NULL && env[0] != '\0') return env;
    return access("/usr/sbin/nginx", X_OK) == 0 ? "/usr/sbin/nginx" : "nginx";
}

/* Under ASan and UBSan the module's libhilock.a calls their runtimes,
 * which Debian's nginx does not load: preload the ones this process uses. */
static void sanitizer_preload(char *out, size_t size) {
    static const char *const libs[] = {"libasan.so", "libubsan.so"}; /* ASan first */
    char line[512];
    out[0] = '\0';
    for (size_t i = 0; i < 2; i++) {
        FILE *f = fopen("/proc/self/maps", "r");
        if (f == NULL) return;
        while (fgets(line, sizeof(line), f) != NULL) {
            char *path = strchr(line, '/');
            if (path == NULL) continue;
            path[strcspn(path, "\n")] = '\0';
            if (strncmp(strrchr(path, '/') + 1, libs[i], strlen(libs[i])) != 0) continue;
            if (strstr(out, path) != NULL) continue;
            size_t len = strlen(out);
            snprintf(out + len, size - len, "%s%s", len ? " " : "", path);
        }
        fclose(f);
    }
}

static int write_conf(const char *dir, int port, int workers, const char *http, const char *server) {
    char path[256];
    struct rlimit rl;
    long nofile = 16384;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < nofile)
        nofile = (long)rl.rlim_max;
    snprintf(path, sizeof(path), "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fprintf(f,
            "load_module %s;\n"
            "%s"
            "daemon off;\n"
            "master_process on;\n"
            "worker_processes %d;\n"
            "worker_rlimit_nofile %ld;\n"
            "error_log %s/error.log info;\n"
            "pid %s/nginx.pid;\n"
            "events { worker_connections %ld; }\n"
            "http {\n"
            "    access_log off;\n"
            "    client_body_temp_path %s/body;\n"
            "    proxy_temp_path %s/proxy;\n"
            "    fastcgi_temp_path %s/fastcgi;\n"
            "    uwsgi_temp_path %s/uwsgi;\n"
            "    scgi_temp_path %s/scgi;\n"
            "    %s\n"
            "    server {\n"
            "        listen 127.0.0.1:%d;\n"
            "        %s\n"
            "    }\n"
            "}\n",
            test_nginx_module(), geteuid() == 0 ? "user root;\n" : "", workers, nofile, dir, dir,
            nofile / 2, dir, dir, dir, dir, dir, http, port, server);
    return fclose(f) == 0 ? 0 : -1;
}

/* nginx's own allocations that it never frees (its pools live to exit):
 * not ours to report. The module's and hilock's mallocs are still checked. */
static void write_lsan_suppressions(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return;
    fputs("leak:ngx_memalign\nleak:ngx_alloc\nleak:ngx_calloc\n", f);
    fclose(f);
}

static pid_t spawn_nginx(const char *dir, const char *test_flag) {
    char conf[256], elog[256], out[256], preload[1024], env_preload[1100], supp[256], env_lsan[320];
    char *env[3] = {NULL, NULL, NULL};
    snprintf(conf, sizeof(conf), "%s/nginx.conf", dir);
    snprintf(elog, sizeof(elog), "%s/error.log", dir);
    snprintf(out, sizeof(out), "%s/stderr.log", dir);
    sanitizer_preload(preload, sizeof(preload));
    if (preload[0] != '\0') {
        snprintf(env_preload, sizeof(env_preload), "LD_PRELOAD=%s", preload);
        snprintf(supp, sizeof(supp), "%s/lsan.supp", dir);
        write_lsan_suppressions(supp);
        snprintf(env_lsan, sizeof(env_lsan), "LSAN_OPTIONS=suppressions=%s:print_suppressions=0", supp);
        env[0] = env_preload;
        env[1] = env_lsan;
    }
    const char *argv[] = {nginx_bin(), "-p", dir, "-c", conf, "-e", elog, test_flag, NULL};
    return test_spawn_master(argv, env, out, dir);
}

static int port_accepts(int port) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
    if (fd < 0) return 0;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void dump_file(const char *dir, const char *name) {
    char path[256], buf[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    test_slurp(path, buf, sizeof(buf));
    if (buf[0]) fprintf(stderr, "nginx %s:\n%s\n", name, buf);
}

int test_nginx_start(test_nginx *n, int workers, const char *http, const char *server) {
    memset(n, 0, sizeof(*n));
    if (test_make_dir(n->dir, sizeof(n->dir)) != 0) return -1;
    n->port = test_free_port();
    if (write_conf(n->dir, n->port, workers, http, server) != 0) return -1;
    n->pid = spawn_nginx(n->dir, NULL);
    if (n->pid < 0) return -1;
    long long until = test_now_ms() + 10000;
    while (test_now_ms() < until) {
        pid_t w[64];
        if (waitpid(n->pid, NULL, WNOHANG) == n->pid) {
            n->pid = 0;
            break;
        }
        if (port_accepts(n->port) && test_nginx_workers(n, w, 64) >= workers) return 0;
        test_msleep(10);
    }
    fprintf(stderr, "nginx did not start on port %d\n", n->port);
    dump_file(n->dir, "stderr.log");
    dump_file(n->dir, "error.log");
    return -1;
}

int test_nginx_check(int workers, const char *http, const char *server, char *out, size_t size) {
    char dir[128], path[256];
    int st = -1;
    out[0] = '\0';
    if (test_make_dir(dir, sizeof(dir)) != 0) return -1;
    if (write_conf(dir, test_free_port(), workers, http, server) == 0) {
        pid_t pid = spawn_nginx(dir, "-t");
        st = pid > 0 ? test_wait(pid, 10000) : -1;
        snprintf(path, sizeof(path), "%s/stderr.log", dir);
        test_slurp(path, out, size);
    }
    test_remove_dir(dir);
    return st;
}

int test_nginx_workers(const test_nginx *n, pid_t *out, int max) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int k = 0;
    if (d == NULL || n->pid <= 0) {
        if (d) closedir(d);
        return 0;
    }
    while ((e = readdir(d)) != NULL && k < max) {
        char path[300], stat[512];
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        test_slurp(path, stat, sizeof(stat));
        const char *p = strrchr(stat, ')');
        int ppid = 0;
        char state = 0;
        if (p == NULL || sscanf(p + 1, " %c %d", &state, &ppid) != 2) continue;
        if (ppid == n->pid && state != 'Z') out[k++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return k;
}

int test_nginx_wait_new_workers(const test_nginx *n, const pid_t *old, int nold, int want, int ms) {
    long long until = test_now_ms() + ms;
    do {
        pid_t w[64];
        int k = test_nginx_workers(n, w, 64), fresh = 0;
        for (int i = 0; i < k; i++) {
            int was = 0;
            for (int j = 0; j < nold; j++) was |= w[i] == old[j];
            fresh += !was;
        }
        if (fresh >= want && k == fresh) return 0;
        test_msleep(10);
    } while (test_now_ms() < until);
    return -1;
}

static int bad_line(const test_nginx *n, const char *line) {
    static const char *const bad[] = {"[alert]", "[crit]", "[emerg]", "Sanitizer", "runtime error",
                                      "Invalid read", "Invalid write", "definitely lost"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (strstr(line, bad[i]) == NULL) continue;
        if (n->killed_worker && strstr(line, "exited on signal 9") != NULL) return 0;
        return 1;
    }
    return 0;
}

int test_nginx_problems(const test_nginx *n, char *out, size_t size) {
    static const char *const files[] = {"error.log", "stderr.log"};
    int count = 0;
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < 2; i++) {
        char path[256], line[1024];
        snprintf(path, sizeof(path), "%s/%s", n->dir, files[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        while (fgets(line, sizeof(line), f) != NULL) {
            if (!bad_line(n, line)) continue;
            count++;
            if (len + 1 < size) {
                snprintf(out + len, size - len, "%.300s", line);
                len = strlen(out);
            }
        }
        fclose(f);
    }
    return count;
}

static void kill_all(test_nginx *n) {
    pid_t w[64];
    int k = test_nginx_workers(n, w, 64);
    for (int i = 0; i < k; i++) kill(w[i], SIGKILL);
    if (n->pid > 0) {
        kill(n->pid, SIGKILL);
        while (waitpid(n->pid, NULL, 0) < 0 && errno == EINTR) {}
    }
    n->pid = 0;
    /* Its workers, now children of init, may take a moment to go. */
    for (int i = 0; i < k; i++)
        for (int t = 0; t < 200 && kill(w[i], 0) == 0; t++) test_msleep(5);
}

int test_nginx_quit(test_nginx *n, int ms) {
    if (n->pid <= 0) return 0;
    kill(n->pid, SIGQUIT);
    if (test_wait(n->pid, ms) >= 0) {
        n->pid = 0;
        return 0;
    }
    kill_all(n);
    return -1;
}

void test_nginx_free(test_nginx *n) {
    if (n->pid > 0) kill_all(n);
    if (n->dir[0] != '\0') test_remove_dir(n->dir);
    n->dir[0] = '\0';
}

/* ---- A backend that records overlaps -------------------------------------- */

typedef struct conn_arg {
    test_backend *b;
    int fd;
} conn_arg;

/* The value of `name=` in the request line, into out. */
static void query_value(const char *req, const char *name, char *out, size_t size) {
    const char *end = strstr(req, " HTTP/"), *p = req;
    size_t nl = strlen(name);
    out[0] = '\0';
    if (end == NULL) return;
    while ((p = strstr(p, name)) != NULL && p < end) {
        if (p[nl] == '=' && (p[-1] == '?' || p[-1] == '&')) {
            size_t k = strcspn(p + nl + 1, "& ");
            if (k >= size) k = size - 1;
            memcpy(out, p + nl + 1, k);
            out[k] = '\0';
            return;
        }
        p += nl;
    }
}

static const char *header_in(const char *head, const char *name, char *out, size_t size) {
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *p = strstr(head, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, nl) != 0 || p[2 + nl] != ':') continue;
        const char *v = p + 3 + nl;
        while (*v == ' ') v++;
        size_t k = strcspn(v, "\r\n");
        if (k >= size) k = size - 1;
        memcpy(out, v, k);
        out[k] = '\0';
        break;
    }
    return out;
}

static test_backend_key *key_of(test_backend *b, const char *name) {
    for (int i = 0; i < TEST_BACKEND_KEYS; i++) {
        test_backend_key *k = &b->keys[i];
        if (k->name[0] == '\0') {
            snprintf(k->name, sizeof(k->name), "%s", name);
            return k;
        }
        if (strcmp(k->name, name) == 0) return k;
    }
    return NULL;
}

static void serve(test_backend *b, int fd) {
    char req[8192], key[64], ms[16], fence[32];
    size_t len = 0;
    while (len < sizeof(req) - 1) {
        ssize_t r = read(fd, req + len, sizeof(req) - 1 - len);
        if (r <= 0) return;
        len += (size_t)r;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL) break;
    }
    query_value(req, "key", key, sizeof(key));
    query_value(req, "ms", ms, sizeof(ms));
    header_in(req, "X-Fence", fence, sizeof(fence));

    pthread_mutex_lock(&b->mu);
    test_backend_key *k = key_of(b, key);
    if (++b->inflight > b->max_inflight) b->max_inflight = b->inflight;
    if (fence[0] == '\0') b->no_fence++;
    if (k != NULL) {
        if (++k->inflight > 1) k->overlaps++;
        if (fence[0] != '\0') {
            unsigned long long f = strtoull(fence, NULL, 10);
            if (f <= k->last_fence) k->fence_errors++;
            else k->last_fence = f;
        }
    }
    pthread_mutex_unlock(&b->mu);

    if (atoi(ms) > 0) test_msleep(atoi(ms));

    pthread_mutex_lock(&b->mu);
    b->inflight--;
    b->served++;
    if (k != NULL) {
        k->inflight--;
        k->served++;
    }
    pthread_mutex_unlock(&b->mu);
    static const char reply[] = "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
    (void)!write(fd, reply, sizeof(reply) - 1);
}

static void *conn_main(void *p) {
    conn_arg a = *(conn_arg *)p;
    free(p);
    struct timeval tv = {10, 0};
    setsockopt(a.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    serve(a.b, a.fd);
    close(a.fd);
    pthread_mutex_lock(&a.b->mu);
    a.b->live--;
    pthread_mutex_unlock(&a.b->mu);
    return NULL;
}

static void *accept_main(void *p) {
    test_backend *b = p;
    for (;;) {
        int fd = accept(b->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return NULL;
        }
        conn_arg *a = malloc(sizeof(*a));
        pthread_t t;
        pthread_attr_t attr;
        pthread_mutex_lock(&b->mu);
        b->live++;
        pthread_mutex_unlock(&b->mu);
        a->b = b;
        a->fd = fd;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&t, &attr, conn_main, a) != 0) {
            close(fd);
            free(a);
            pthread_mutex_lock(&b->mu);
            b->live--;
            pthread_mutex_unlock(&b->mu);
        }
        pthread_attr_destroy(&attr);
    }
}

int test_backend_start(test_backend *b) {
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
    b->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->fd < 0) return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(b->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(b->fd, 1024) != 0 ||
        getsockname(b->fd, (struct sockaddr *)&a, &alen) != 0) {
        close(b->fd);
        return -1;
    }
    b->port = ntohs(a.sin_port);
    return pthread_create(&b->acceptor, NULL, accept_main, b) == 0 ? 0 : -1;
}

void test_backend_stop(test_backend *b, int ms) {
    if (b->fd < 0 || b->port == 0) return;
    shutdown(b->fd, SHUT_RDWR); /* accept() returns */
    pthread_join(b->acceptor, NULL);
    close(b->fd);
    b->fd = -1;
    for (long long until = test_now_ms() + ms; test_now_ms() < until;) {
        pthread_mutex_lock(&b->mu);
        int live = b->live;
        pthread_mutex_unlock(&b->mu);
        if (live == 0) break;
        test_msleep(5);
    }
}

test_backend_key test_backend_key_get(test_backend *b, const char *name) {
    test_backend_key k;
    memset(&k, 0, sizeof(k));
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < TEST_BACKEND_KEYS; i++)
        if (strcmp(b->keys[i].name, name) == 0) k = b->keys[i];
    pthread_mutex_unlock(&b->mu);
    return k;
}

int test_backend_served(test_backend *b) {
    pthread_mutex_lock(&b->mu);
    int n = b->served;
    pthread_mutex_unlock(&b->mu);
    return n;
}

/* ---- An HTTP/1.0 client -------------------------------------------------- */

void test_http_rlimit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int test_http_send(test_http *h, int port, const char *path) {
    char req[1024];
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: test\r\n\r\n", path);
    return test_http_send_raw(h, port, req);
}

int test_http_send_raw(test_http *h, int port, const char *req) {
    struct sockaddr_in a;
    ssize_t len = (ssize_t)strlen(req);
    memset(h, 0, sizeof(*h));
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (h->fd < 0) return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h->sent_ms = test_now_ms();
    if (connect(h->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || write(h->fd, req, (size_t)len) != len) {
        test_http_abort(h);
        return -1;
    }
    fcntl(h->fd, F_SETFL, fcntl(h->fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

static void finish(test_http *h) {
    int major, minor, status;
    close(h->fd);
    h->fd = -1;
    h->done_ms = test_now_ms();
    h->buf[h->len] = '\0';
    h->status = sscanf(h->buf, "HTTP/%d.%d %d", &major, &minor, &status) == 3 ? status : -1;
}

int test_http_wait(test_http *hs, int n, int ms) {
    struct pollfd *p = calloc((size_t)n, sizeof(*p));
    int *idx = calloc((size_t)n, sizeof(*idx));
    long long until = test_now_ms() + ms;
    int open;
    for (;;) {
        open = 0;
        for (int i = 0; i < n; i++) {
            if (hs[i].fd < 0) continue;
            p[open].fd = hs[i].fd;
            p[open].events = POLLIN;
            idx[open++] = i;
        }
        long long left = until - test_now_ms();
        if (open == 0 || left <= 0) break;
        if (poll(p, (nfds_t)open, (int)left) < 0 && errno != EINTR) break;
        for (int j = 0; j < open; j++) {
            test_http *h = &hs[idx[j]];
            if (p[j].revents == 0) continue;
            char scratch[4096];
            size_t room = sizeof(h->buf) - 1 - h->len;
            ssize_t r = room > 0 ? read(h->fd, h->buf + h->len, room) : read(h->fd, scratch, sizeof(scratch));
            if (r > 0 && room > 0) h->len += (size_t)r;
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) finish(h);
        }
    }
    free(p);
    free(idx);
    return open;
}

void test_http_abort(test_http *h) {
    if (h->fd >= 0) close(h->fd);
    h->fd = -1;
    h->status = -1;
    h->done_ms = test_now_ms();
}

int test_http_get(test_http *h, int port, const char *path, int ms) {
    if (test_http_send(h, port, path) != 0) return -1;
    if (test_http_wait(h, 1, ms) != 0) test_http_abort(h);
    return h->status;
}

const char *test_http_header(const test_http *h, const char *name, char *out, size_t size) {
    return header_in(h->buf, name, out, size);
}

int test_http_fetch(int port, const char *req, char *out, size_t size, char **body, int ms) {
    test_http h;
    size_t len = 0;
    long long until = test_now_ms() + ms;
    out[0] = '\0';
    *body = out;
    if (test_http_send_raw(&h, port, req) != 0) return -1;
    for (;;) {
        struct pollfd p = {h.fd, POLLIN, 0};
        long long left = until - test_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) < 0) break;
        ssize_t r = read(h.fd, out + len, size - 1 - len);
        if (r > 0) len += (size_t)r;
        if (r == 0 || len == size - 1 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            out[len] = '\0';
            close(h.fd);
            int major, minor, status;
            char *end = strstr(out, "\r\n\r\n");
            *body = end != NULL ? end + 4 : out + len;
            return sscanf(out, "HTTP/%d.%d %d", &major, &minor, &status) == 3 ? status : -1;
        }
    }
    test_http_abort(&h);
    return -1;
}
