/* Redis URLs: redis://[[user]:pass@]host[:port][,host[:port]...][/db],
 * unix:///path[?db=N], redis-sentinel://...#MASTER and redlock://... (the
 * forms of net.h), and their TLS forms rediss://, rediss-sentinel:// and
 * redlocks://. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "net/net.h"

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* Copy [s, s+n) percent-decoded into a new string; NULL on a bad escape or
 * an encoded NUL. */
static char *decode(const char *s, size_t n) {
    char *out = malloc(n + 1), *p = out;
    if (out == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n) { free(out); return NULL; }
            int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
            if (a < 0 || b < 0 || (a == 0 && b == 0)) { free(out); return NULL; }
            *p++ = (char)(a * 16 + b);
            i += 2;
        } else {
            *p++ = s[i];
        }
    }
    *p = '\0';
    return out;
}

static int parse_int(const char *s, size_t n, long min, long max, int *out) {
    if (n == 0 || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max) return -1;
    *out = (int)v;
    return 0;
}

void hl_url_free(hl_url *u) {
    free(u->host); free(u->path); free(u->user); free(u->pass); free(u->master);
    for (int i = 0; i < u->nmore; i++) free(u->more[i].host);
    memset(u, 0, sizeof(*u));
}

/* host[:port] or [v6][:port] in [p, end): a new host string and the port
 * (6379 when absent); NULL on a malformed address. */
static char *parse_hostport(const char *p, const char *end, int *port, int default_port) {
    const char *hend;
    char *host;
    *port = default_port;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (rb == NULL || rb == p + 1) return NULL;
        host = strndup(p + 1, (size_t)(rb - p - 1));
        hend = rb + 1;
        if (hend < end && *hend != ':') { free(host); return NULL; }
    } else {
        hend = memchr(p, ':', (size_t)(end - p));
        if (hend == NULL) hend = end;
        if (hend == p) return NULL;
        host = strndup(p, (size_t)(hend - p));
    }
    if (host == NULL) return NULL;
    for (const char *h = host; *h; h++)
        if (isspace((unsigned char)*h) || strchr("/@,#", *h)) { free(host); return NULL; }
    if (hend < end && parse_int(hend + 1, (size_t)(end - hend - 1), 1, 65535, port) < 0) {
        free(host);
        return NULL;
    }
    return host;
}

/* The comma-separated seeds in [p, end). */
static int parse_seeds(hl_url *u, const char *p, const char *end) {
    int dport = u->kind == HL_URL_SENTINEL ? 26379 : 6379;
    for (int i = 0; p < end; i++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        if (i >= HL_URL_MAX_SEEDS) return -1;
        hl_addr *a = i == 0 ? NULL : &u->more[i - 1];
        char *host = parse_hostport(p, e, i == 0 ? &u->port : &a->port, dport);
        if (host == NULL) return -1;
        if (i == 0) u->host = host;
        else { a->host = host; u->nmore = i; }
        if (comma && comma + 1 == end) return -1; /* a trailing comma */
        p = comma ? comma + 1 : end;
    }
    return u->host ? 0 : -1;
}

static int fail(hl_url *u) { hl_url_free(u); return HILOCK_EURL; }

int hl_url_parse(const char *s, hl_url *u) {
    memset(u, 0, sizeof(*u));
    u->port = 6379;
    if (s == NULL) s = "redis://127.0.0.1:6379";
    if (strncmp(s, "unix://", 7) == 0) {
        const char *path = s + 7, *q = strchr(path, '?');
        size_t plen = q ? (size_t)(q - path) : strlen(path);
        if (plen == 0 || path[0] != '/') return fail(u);
        if ((u->path = decode(path, plen)) == NULL) return fail(u);
        if (q) {
            if (strncmp(q + 1, "db=", 3) != 0) return fail(u);
            if (parse_int(q + 4, strlen(q + 4), 0, 1 << 20, &u->db) < 0) return fail(u);
        }
        return 0;
    }
    /* The TLS form of each scheme: an 's' after "redis" (as redis-cli's
     * rediss://), and after "redlock" where there is no "redis". */
    static const struct { const char *scheme; int kind, tls; } schemes[] = {
        {"redis://", HL_URL_REDIS, 0}, {"redis-sentinel://", HL_URL_SENTINEL, 0},
        {"redlock://", HL_URL_REDLOCK, 0}, {"rediss://", HL_URL_REDIS, 1},
        {"rediss-sentinel://", HL_URL_SENTINEL, 1}, {"redlocks://", HL_URL_REDLOCK, 1},
    };
    const char *p = NULL, *end;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]) && p == NULL; i++)
        if (strncmp(s, schemes[i].scheme, strlen(schemes[i].scheme)) == 0) {
            u->kind = schemes[i].kind;
            u->tls = schemes[i].tls;
            p = s + strlen(schemes[i].scheme);
        }
    if (p == NULL) return fail(u);
    end = p + strlen(p);
    /* The fragment names a sentinel's master (the last '#': a password may
     * hold one). */
    const char *hash = u->kind == HL_URL_SENTINEL ? memrchr(p, '#', (size_t)(end - p)) : NULL;
    if (u->kind == HL_URL_SENTINEL) {
        if (hash == NULL || hash + 1 == end || (u->master = decode(hash + 1, (size_t)(end - hash - 1))) == NULL)
            return fail(u);
        for (const char *m = u->master; *m; m++) /* +switch-master splits on spaces */
            if (isspace((unsigned char)*m)) return fail(u);
        end = hash;
    }
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *auth_end = slash ? slash : end;
    /* The last '@' before the path ends the userinfo (a password may hold '@'
     * only percent-encoded, but be lenient). */
    const char *at = NULL;
    for (const char *x = p; x < auth_end; x++)
        if (*x == '@') at = x;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p && (u->user = decode(p, (size_t)(colon - p))) == NULL) return fail(u);
            if ((u->pass = decode(colon + 1, (size_t)(at - colon - 1))) == NULL) return fail(u);
        } else if (at > p) {
            /* redis://secret@host: a bare password, as redis-cli accepts. */
            if ((u->pass = decode(p, (size_t)(at - p))) == NULL) return fail(u);
        }
        p = at + 1;
    }
    if (parse_seeds(u, p, auth_end) != 0) return fail(u);
    if (slash && slash + 1 < end) {
        if (parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1 << 20, &u->db) < 0)
            return fail(u);
    }
    return 0;
}

const char *hl_addr_text(const hl_addr *a, char *buf, size_t n) {
    if (a->path != NULL) snprintf(buf, n, "%s", a->path);
    else if (a->host != NULL && strchr(a->host, ':') != NULL) snprintf(buf, n, "[%s]:%d", a->host, a->port);
    else snprintf(buf, n, "%s:%d", a->host ? a->host : "?", a->port);
    return buf;
}
