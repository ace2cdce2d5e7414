/* The C API's man pages (man/man3/ and the overview man/hilock.3) against
 * the public headers, so that a function cannot be added, renamed or
 * changed without its page:
 *
 *   - every HILOCK_API function of include/hilock/hilock.h, every
 *     function-like macro of it named hilock_* (the init macros), and every
 *     public `static inline` (nginx: `static ngx_inline`) function of the
 *     headers of adapters/ (hilock_*, not ending in '_') has
 *     man/man3/NAME.3: a page whose NAME section lists it, or a
 *     ".so man3/PAGE.3" link to one; that page's SYNOPSIS has the header's
 *     prototype (compared without white space) or, for a macro, its name
 *     and parameter;
 *   - every file of man/man3/ is such a page or link, its .TH names the
 *     page and this version, its NAME line is whatis-style
 *     ("a, b \- what") and lists public names only, each with its file;
 *   - SEE ALSO, and every "name (N)" reference to a hilock page anywhere,
 *     names a page that exists, and hilock(3) names every function page;
 *   - the pages render with `man --warnings` without a word on stderr, and
 *     lexgrog reads their NAME lines (skipped when man is not installed).
 *
 * The source tree is found above the test binary (the build dir lies
 * inside it): test_src_path. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hilock/hilock.h"
#include "support/harness.h"

/* ---- The source tree ------------------------------------------------------ */

static char root[PATH_MAX];

/* snprintf that must fit. */
static void put(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    cr_assert(len >= 0 && (size_t)len < n, "%zu bytes are too few for \"%s\"", n, fmt);
}

/* The source tree: the nearest directory above this binary with the man
 * pages. */
static void find_root(void) {
    static const char page[] = "/man/hilock.3";
    cr_assert_not_null(test_src_path(page + 1, root, sizeof(root)),
                       "no source tree (man/hilock.3) above the test binary");
    root[strlen(root) - strlen(page)] = '\0';
}

static const char *at(const char *fmt, const char *a) {
    static char ring[8][PATH_MAX + 256];
    static int next;
    char *p = ring[next++ % 8];
    char rel[PATH_MAX];
    put(rel, sizeof(rel), fmt, a);
    put(p, sizeof(ring[0]), "%s/%s", root, rel);
    return p;
}

/* ---- The public names, from the headers --------------------------------- */

enum kind { K_FUNCTION, K_MACRO, K_ADAPTER };

typedef struct api_name {
    char name[64];
    enum kind kind;
    char proto[512];   /* the prototype without white space, with ';' (functions) */
    char param[32];    /* a macro's parameter */
    char where[64];    /* the header it comes from */
} api_name;

static api_name api[128];
static int napi;

static void squeeze(char *out, size_t n, const char *from, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++)
        if (!isspace((unsigned char)from[i])) out[o++] = from[i];
    out[o] = '\0';
}

static int ident_char(int c) { return isalnum(c) || c == '_'; }

/* The identifier that ends just before `end` (exclusive), into out. */
static void ident_before(const char *start, const char *end, char *out, size_t n) {
    while (end > start && isspace((unsigned char)end[-1])) end--;
    const char *b = end;
    while (b > start && ident_char((unsigned char)b[-1])) b--;
    put(out, n, "%.*s", (int)(end - b), b);
}

static api_name *api_add(const char *name, enum kind k, const char *where) {
    cr_assert_lt(napi, (int)(sizeof(api) / sizeof(api[0])), "too many public names");
    for (int i = 0; i < napi; i++)
        cr_assert_str_neq(api[i].name, name, "%s is declared twice (%s, %s)", name, api[i].where, where);
    api_name *a = &api[napi++];
    memset(a, 0, sizeof(*a));
    put(a->name, sizeof(a->name), "%s", name);
    put(a->where, sizeof(a->where), "%s", where);
    a->kind = k;
    return a;
}

/* HILOCK_API declarations (at the start of a line) and `#define hilock_x(`
 * macros of include/hilock/hilock.h. */
static void collect_header(void) {
    char *text = test_slurp_all(at("%s", "include/hilock/hilock.h"));
    cr_assert_not_null(text, "cannot read include/hilock/hilock.h");
    for (char *p = text; (p = strstr(p, "\nHILOCK_API ")) != NULL; p++) {
        char *decl = p + 1 + strlen("HILOCK_API ");
        char *semi = strchr(decl, ';'), *paren = strchr(decl, '(');
        cr_assert(semi != NULL && paren != NULL && paren < semi,
                  "hilock.h: a HILOCK_API line without a prototype");
        char name[64];
        ident_before(decl, paren, name, sizeof(name));
        api_name *a = api_add(name, K_FUNCTION, "include/hilock/hilock.h");
        squeeze(a->proto, sizeof(a->proto), decl, (size_t)(semi + 1 - decl));
    }
    for (char *p = text; (p = strstr(p, "\n#define hilock_")) != NULL; p++) {
        char *name = p + strlen("\n#define ");
        char *paren = name;
        while (ident_char((unsigned char)*paren)) paren++;
        if (*paren != '(') continue; /* not function-like */
        char mname[64];
        put(mname, sizeof(mname), "%.*s", (int)(paren - name), name);
        api_name *a = api_add(mname, K_MACRO, "include/hilock/hilock.h");
        char *close = strchr(paren, ')');
        cr_assert_not_null(close);
        ident_before(paren + 1, close, a->param, sizeof(a->param));
    }
    free(text);
}

/* `static inline` (nginx: `static ngx_inline`) functions hilock_* of the
 * adapters, but for the internal ones, whose names end in '_'. */
static void collect_adapters(void) {
    glob_t g;
    int nheaders = 0;
    cr_assert_eq(glob(at("%s", "adapters/*.h"), 0, NULL, &g), 0, "no adapters/*.h");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *text = test_slurp_all(g.gl_pathv[i]);
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        char where[64];
        put(where, sizeof(where), "adapters/%s", base);
        cr_assert_not_null(text, "cannot read %s", where);
        nheaders++;
        static const char *const starts[] = {"\nstatic inline ", "\nstatic ngx_inline "};
        for (int s = 0; s < 2; s++) {
            for (char *p = text; (p = strstr(p, starts[s])) != NULL; p++) {
                char *decl = p + strlen(starts[s]);
                char *paren = strchr(decl, '(');
                cr_assert_not_null(paren);
                char name[64];
                ident_before(decl, paren, name, sizeof(name));
                size_t len = strlen(name);
                if (strncmp(name, "hilock_", 7) != 0 || name[len - 1] == '_') continue;
                int depth = 0;
                char *close = paren;
                for (; *close; close++) {
                    if (*close == '(') depth++;
                    else if (*close == ')' && --depth == 0) break;
                }
                cr_assert(*close == ')', "%s: %s has no end of its parameters", where, name);
                api_name *a = api_add(name, K_ADAPTER, where);
                char proto[512];
                squeeze(proto, sizeof(proto), decl, (size_t)(close + 1 - decl));
                put(a->proto, sizeof(a->proto), "%s;", proto);
            }
        }
        free(text);
    }
    globfree(&g);
    cr_assert_geq(nheaders, 4, "adapters/: %d headers", nheaders);
}

static void collect_api(void) {
    find_root();
    napi = 0;
    collect_header();
    collect_adapters();
    /* A parser that found nothing would pass everything: the well-known
     * names of each kind must be there. */
    static const char *const must[] = {"hilock_acquire", "hilock_key_slot", "hilock_config_init",
                                       "hilock_acquire_opts_init", "hilock_libevent_init",
                                       "hilock_libuv_init", "hilock_nginx_on_shutdown", NULL};
    for (const char *const *m = must; *m; m++) {
        int found = 0;
        for (int i = 0; i < napi; i++) found |= strcmp(api[i].name, *m) == 0;
        cr_assert(found, "%s was not found in the headers: the parser in %s is broken", *m, __FILE__);
    }
    cr_assert_geq(napi, 40, "only %d public names found", napi);
}

static const api_name *api_find(const char *name) {
    for (int i = 0; i < napi; i++)
        if (strcmp(api[i].name, name) == 0) return &api[i];
    return NULL;
}

/* ---- Reading a page ------------------------------------------------------ */

/* The text of section `sh` (".SH NAME" lines up to the next .SH), or NULL:
 * a pointer into `page`, with *len. */
static const char *section(const char *page, const char *sh, size_t *len) {
    char head[64];
    put(head, sizeof(head), ".SH %s\n", sh);
    const char *s = page;
    if (strncmp(s, head, strlen(head)) != 0) {
        char nl_head[66];
        put(nl_head, sizeof(nl_head), "\n%s", head);
        s = strstr(page, nl_head);
        if (s == NULL) return NULL;
        s++;
    }
    s += strlen(head);
    const char *e = strstr(s, "\n.SH ");
    *len = e ? (size_t)(e + 1 - s) : strlen(s);
    return s;
}

/* roff escapes of the pages, resolved: \- \e \& \% \(dq \(aq \fX \f[..]. */
static void unescape(const char *in, char *out, size_t n) {
    size_t o = 0;
    for (const char *p = in; *p && o + 2 < n; p++) {
        if (*p != '\\') { out[o++] = *p; continue; }
        p++;
        switch (*p) {
        case '-': out[o++] = '-'; break;
        case 'e': out[o++] = '\\'; break;
        case ' ': case '~': out[o++] = ' '; break;
        case '&': case '%': break;
        case 'f':
            if (p[1] == '[') { while (p[1] && p[1] != ']') p++; if (p[1]) p++; }
            else if (p[1]) p++;
            break;
        case '(':
            if (p[1] && p[2]) {
                if (strncmp(p + 1, "dq", 2) == 0) out[o++] = '"';
                else if (strncmp(p + 1, "aq", 2) == 0) out[o++] = '\'';
                else out[o++] = '?';
                p += 2;
            }
            break;
        case '\0': p--; break;
        default: out[o++] = *p; break;
        }
    }
    out[o] = '\0';
}

/* The arguments of a macro line (after the macro's name), roff-style:
 * quoted ("" is a quote) or separated by blanks. Returns how many. */
static int macro_args(const char *line, char args[][256], int max) {
    int n = 0;
    const char *p = line;
    while (*p && n < max) {
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\0' || *p == '\n') break;
        size_t o = 0;
        if (*p == '"') {
            for (p++; *p && *p != '\n'; p++) {
                if (*p == '"' && p[1] == '"') { if (o < 255) args[n][o++] = '"'; p++; continue; }
                if (*p == '"') { p++; break; }
                if (o < 255) args[n][o++] = *p;
            }
        } else {
            for (; *p && *p != ' ' && *p != '\t' && *p != '\n'; p++)
                if (o < 255) args[n][o++] = *p;
        }
        args[n][o] = '\0';
        n++;
    }
    return n;
}

/* The text of `len` bytes of roff as it reads (fonts dropped): font macros
 * joined as groff joins them, other requests dropped, one line each. */
static char *plain(const char *src, size_t len) {
    size_t cap = len * 2 + 1, o = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    const char *end = src + len;
    for (const char *l = src; l < end;) {
        const char *nl = memchr(l, '\n', (size_t)(end - l));
        size_t ll = nl ? (size_t)(nl - l) : (size_t)(end - l);
        char line[1024], text[1024] = "", args[16][256];
        put(line, sizeof(line), "%.*s", (int)ll, l);
        if (line[0] == '.' || line[0] == '\'') {
            char mac[8] = "";
            sscanf(line + 1, "%7s", mac);
            int alt = strcmp(mac, "BI") == 0 || strcmp(mac, "IB") == 0 || strcmp(mac, "BR") == 0 ||
                      strcmp(mac, "RB") == 0 || strcmp(mac, "IR") == 0 || strcmp(mac, "RI") == 0;
            int join = strcmp(mac, "B") == 0 || strcmp(mac, "I") == 0;
            if (alt || join) {
                int n = macro_args(line + 1 + strlen(mac), args, 16);
                for (int i = 0; i < n; i++) {
                    if (join && i > 0) strncat(text, " ", sizeof(text) - strlen(text) - 1);
                    strncat(text, args[i], sizeof(text) - strlen(text) - 1);
                }
            }
        } else {
            put(text, sizeof(text), "%s", line);
        }
        char un[1024];
        unescape(text, un, sizeof(un));
        size_t ul = strlen(un);
        if (o + ul + 2 > cap) {
            cap = (o + ul + 2) * 2;
            out = realloc(out, cap);
            cr_assert_not_null(out);
        }
        memcpy(out + o, un, ul);
        o += ul;
        out[o++] = '\n';
        l += ll + 1;
    }
    out[o] = '\0';
    return out;
}

/* The names of a NAME section ("a, b, c \- what"), into names; returns how
 * many, or -1 if the section is not one whatis line of that form. */
static int name_list(const char *page, char names[][64], int max, char *why, size_t whyn) {
    size_t len;
    const char *s = section(page, "NAME", &len);
    if (s == NULL) { put(why, whyn, "no .SH NAME"); return -1; }
    const char *nl = memchr(s, '\n', len);
    if (nl == NULL || (size_t)(nl + 1 - s) != len) {
        put(why, whyn, "NAME is not one line: %.*s", (int)len, s);
        return -1;
    }
    char line[1024];
    put(line, sizeof(line), "%.*s", (int)(nl - s), s);
    char *dash = strstr(line, " \\- ");
    if (dash == NULL || dash[4] == '\0') {
        put(why, whyn, "NAME has no \" \\- description\": %s", line);
        return -1;
    }
    *dash = '\0';
    int n = 0;
    for (char *save = NULL, *t = strtok_r(line, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        if (n >= max || *t == '\0' || strchr(t, ' ') != NULL) {
            put(why, whyn, "NAME lists \"%s\": not a name", t);
            return -1;
        }
        put(names[n++], 64, "%s", t);
    }
    return n;
}

/* A page of man/man3 as read: NULL if the file does not exist. For a
 * ".so man3/X.3" link, *target is X (else ""), and the result is X's text. */
static char *read_page(const char *name, char *target, size_t tn) {
    target[0] = '\0';
    char *text = test_slurp_all(at("man/man3/%s.3", name));
    if (text == NULL || strncmp(text, ".so ", 4) != 0) return text;
    char t[256];
    cr_assert(sscanf(text, ".so man3/%255[^. \n].3", t) == 1 &&
                  strcmp(strchr(text, '\n') ? strchr(text, '\n') + 1 : "", "") == 0,
              "man/man3/%s.3 is a link but not one line \".so man3/PAGE.3\": %s", name, text);
    free(text);
    put(target, tn, "%s", t);
    text = test_slurp_all(at("man/man3/%s.3", t));
    cr_assert_not_null(text, "man/man3/%s.3 links to man3/%s.3, which does not exist", name, t);
    cr_assert(strncmp(text, ".so ", 4) != 0, "man/man3/%s.3 links to man3/%s.3, itself a link", name, t);
    return text;
}

static int lists(char names[][64], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return 1;
    return 0;
}

/* The files of man/man3 (NAME.3 -> NAME), sorted. */
static int man3_files(char out[][64], int max) {
    glob_t g;
    int n = 0;
    if (glob(at("%s", "man/man3/*.3"), 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc && n < max; i++) {
        const char *b = strrchr(g.gl_pathv[i], '/') + 1;
        put(out[n++], 64, "%.*s", (int)(strlen(b) - 2), b);
    }
    globfree(&g);
    return n;
}

/* ---- Tests ---------------------------------------------------------------- */

Test(man, every_public_function_has_a_page) {
    collect_api();
    for (int i = 0; i < napi; i++) {
        const api_name *a = &api[i];
        char target[256], names[64][64], why[512];
        char *page = read_page(a->name, target, sizeof(target));
        cr_expect_not_null(page, "%s (%s) has no page: man/man3/%s.3", a->name, a->where, a->name);
        if (page == NULL) continue;
        const char *shown = target[0] ? target : a->name;
        int n = name_list(page, names, 64, why, sizeof(why));
        cr_expect_gt(n, 0, "man/man3/%s.3: %s", shown, why);
        cr_expect(n > 0 && lists(names, n, a->name), "%s: its page man/man3/%s.3 does not list it under NAME",
                  a->name, shown);

        size_t len;
        const char *syn = section(page, "SYNOPSIS", &len);
        cr_expect_not_null(syn, "man/man3/%s.3 has no SYNOPSIS", shown);
        if (syn == NULL) { free(page); continue; }
        char *text = plain(syn, len);
        char *flat = malloc(strlen(text) + 1);
        cr_assert_not_null(flat);
        squeeze(flat, strlen(text) + 1, text, strlen(text));
        if (a->kind == K_MACRO) {
            char call[80];
            put(call, sizeof(call), "%s(", a->name);
            const char *c = strstr(flat, call);
            cr_expect_not_null(c, "%s (a macro of %s): man/man3/%s.3's SYNOPSIS does not show it:\n%s",
                               a->name, a->where, shown, text);
            if (c != NULL) {
                const char *close = strchr(c, ')');
                size_t pl = strlen(a->param);
                cr_expect(close != NULL && (size_t)(close - c) > pl &&
                              strncmp(close - pl, a->param, pl) == 0 &&
                              !ident_char((unsigned char)close[-(long)pl - 1]),
                          "%s(%s): man/man3/%s.3's SYNOPSIS names another parameter:\n%s", a->name, a->param,
                          shown, text);
            }
        } else {
            cr_expect_not_null(strstr(flat, a->proto),
                               "%s: man/man3/%s.3's SYNOPSIS does not have the prototype of %s,\n  %s\n"
                               "(white space aside) in:\n%s",
                               a->name, shown, a->where, a->proto, text);
        }
        cr_expect_not_null(strstr(text, "#include <hilock/"), "man/man3/%s.3: SYNOPSIS has no #include",
                           shown);
        free(flat);
        free(text);
        free(page);
    }
}

Test(man, every_page_is_a_page_or_a_link) {
    collect_api();
    static char files[256][64];
    int nf = man3_files(files, 256);
    cr_assert_gt(nf, 0, "man/man3/ has no page");
    int real = 0;
    for (int f = 0; f < nf; f++) {
        char target[256], names[64][64], why[512];
        char *page = read_page(files[f], target, sizeof(target));
        cr_assert_not_null(page);
        int n = name_list(page, names, 64, why, sizeof(why));
        const char *shown = target[0] ? target : files[f];
        cr_expect_gt(n, 0, "man/man3/%s.3: %s", shown, why);
        if (n <= 0) { free(page); continue; }
        if (target[0]) {
            cr_expect(lists(names, n, files[f]),
                      "man/man3/%s.3 links to man3/%s.3, whose NAME does not list %s", files[f], target,
                      files[f]);
            free(page);
            continue;
        }
        real++;
        cr_expect(lists(names, n, files[f]), "man/man3/%s.3: NAME does not list %s", files[f], files[f]);

        /* .TH NAME 3 DATE "hilock VERSION" "Library Functions Manual" */
        char th[128], upper[64];
        size_t k;
        for (k = 0; files[f][k] && k + 1 < sizeof(upper); k++)
            upper[k] = (char)toupper((unsigned char)files[f][k]);
        upper[k] = '\0';
        put(th, sizeof(th), "\n.TH %s 3 ", upper);
        const char *t = strstr(page, th);
        cr_expect_not_null(t, "man/man3/%s.3: no \"%s\" line", files[f], th + 1);
        if (t != NULL) {
            const char *eol = strchr(t + 1, '\n');
            char line[256];
            put(line, sizeof(line), "%.*s", eol ? (int)(eol - t - 1) : 200, t + 1);
            cr_expect_not_null(strstr(line, " \"hilock " HILOCK_VERSION "\" \"Library Functions Manual\""),
                               "man/man3/%s.3: %s (want \"hilock %s\" \"Library Functions Manual\")",
                               files[f], line, HILOCK_VERSION);
        }
        static const char *const sections[] = {"NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUE", "SEE ALSO",
                                               NULL};
        for (const char *const *s = sections; *s; s++) {
            size_t len;
            cr_expect_not_null(section(page, *s, &len), "man/man3/%s.3 has no .SH %s", files[f], *s);
        }
        /* What NAME lists is public, and each name has its file here. */
        for (int i = 0; i < n; i++) {
            cr_expect_not_null(api_find(names[i]),
                               "man/man3/%s.3 documents %s, which no public header declares", files[f],
                               names[i]);
            char t2[256];
            char *other = read_page(names[i], t2, sizeof(t2));
            cr_expect_not_null(other,
                               "man/man3/%s.3 lists %s, which has no man/man3/%s.3 "
                               "(a link: \".so man3/%s.3\")",
                               files[f], names[i], names[i], files[f]);
            if (other != NULL && strcmp(names[i], files[f]) != 0)
                cr_expect_str_eq(t2, files[f], "man/man3/%s.3 should link to man3/%s.3, which lists it",
                                 names[i], files[f]);
            free(other);
        }
        free(page);
    }
    cr_expect_geq(real, 10, "only %d real pages in man/man3", real);
}

/* Pages of other projects that SEE ALSO may name: they cannot be checked
 * here. */
static const char *const foreign[] = {"event_base_new(3)", "ev(3)", "redis-server(1)", "fork(2)",
                                      "write(2)", "put(3)", "getaddrinfo(3)", "uv_loop_init(3)", NULL};

/* Does the page `name`(`sect`) exist (in this tree, or is it a foreign one)? */
static int page_exists(const char *name, const char *sect) {
    char full[128];
    put(full, sizeof(full), "%s(%s)", name, sect);
    for (const char *const *f = foreign; *f; f++)
        if (strcmp(*f, full) == 0) return 1;
    if (strcmp(name, "hilock") == 0 && (strcmp(sect, "1") == 0 || strcmp(sect, "3") == 0))
        return access(at(strcmp(sect, "1") == 0 ? "man/%s.1" : "man/%s.3", name), F_OK) == 0;
    if (strcmp(sect, "3") != 0) return 0;
    return access(at("man/man3/%s.3", name), F_OK) == 0;
}

/* Every "hilock... (N)" reference of a font-macro line of `page`, checked;
 * those of SEE ALSO must all be such lines, each naming a page that exists. */
static void check_refs(const char *file, const char *page) {
    size_t slen;
    const char *see = section(page, "SEE ALSO", &slen);
    cr_expect_not_null(see, "%s has no SEE ALSO", file);
    int nsee = 0;
    for (const char *l = page; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int in_see = see != NULL && l >= see && l < see + slen;
        char line[1024], args[16][256];
        const char *nl = strchr(l, '\n');
        put(line, sizeof(line), "%.*s", nl ? (int)(nl - l) : (int)strlen(l), l);
        if (in_see) {
            cr_expect(strncmp(line, ".BR ", 4) == 0, "%s: SEE ALSO has \"%s\" (want .BR name (N),)", file,
                      line);
            if (strncmp(line, ".BR ", 4) != 0) continue;
        }
        int font2 = line[0] == '.' && line[1] != '\0' && line[2] != '\0' && strchr("BIR", line[1]) != NULL &&
                    strchr("BIR", line[2]) != NULL && line[3] == ' ';
        if (!font2) continue;
        int n = macro_args(line + 3, args, 16);
        for (int i = 0; i + 1 < n; i++) {
            char name[256], sect[8];
            unescape(args[i], name, sizeof(name));
            if (sscanf(args[i + 1], "(%7[0-9])", sect) != 1) continue;
            if (!in_see && strncmp(name, "hilock", 6) != 0) continue;
            if (in_see) nsee++;
            cr_expect(page_exists(name, sect),
                      "%s names %s(%s), which is no page of man/ (nor a known foreign one)", file, name,
                      sect);
        }
    }
    if (see != NULL) cr_expect_gt(nsee, 0, "%s: SEE ALSO names no page", file);
}

Test(man, references_name_pages_that_exist) {
    collect_api();
    static char files[256][64];
    int nf = man3_files(files, 256);
    char *overview = test_slurp_all(at("%s", "man/hilock.3"));
    cr_assert_not_null(overview, "cannot read man/hilock.3");
    check_refs("man/hilock.3", overview);
    for (int f = 0; f < nf; f++) {
        char *page = test_slurp_all(at("man/man3/%s.3", files[f]));
        cr_assert_not_null(page);
        if (strncmp(page, ".so ", 4) != 0) {
            char file[128], ref[128];
            put(file, sizeof(file), "man/man3/%s.3", files[f]);
            check_refs(file, page);
            /* hilock(3) names every function page. */
            put(ref, sizeof(ref), "\n.BR %s (3)", files[f]);
            cr_expect_not_null(strstr(overview, ref), "man/hilock.3 does not name %s(3)", files[f]);
        }
        free(page);
    }
    free(overview);
}

/* Run `sh -c CMD` in man/, stdout and stderr into files of dir; its status. */
static int run_in_man(const char *dir, const char *cmd, char *out, size_t on, char *err, size_t en) {
    char script[PATH_MAX + 1024], o[PATH_MAX + 16], e[PATH_MAX + 16];
    put(script, sizeof(script), "cd '%s/man' && %s", root, cmd);
    put(o, sizeof(o), "%s/out", dir);
    put(e, sizeof(e), "%s/err", dir);
    char *argv[] = {"sh", "-c", script, NULL};
    char *env[] = {"MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LC_ALL=C.UTF-8", NULL};
    pid_t pid = test_spawn(argv, env, o, e);
    cr_assert_gt(pid, 0, "cannot start sh");
    int rc = test_wait(pid, 60000);
    if (rc == -1) {
        kill(pid, SIGKILL);
        test_wait(pid, 5000);
    }
    test_slurp(o, out, on);
    test_slurp(e, err, en);
    return rc;
}

Test(man, pages_render_without_warnings, .timeout = 240) {
    find_root();
    static char files[256][64];
    int nf = man3_files(files, 256);
    char dir[PATH_MAX];
    cr_assert_eq(test_make_dir(dir, sizeof(dir)), 0);
    static char out[262144];
    char err[8192], cmd[512];
    int rc = run_in_man(dir, "command -v man >/dev/null || exit 127", out, sizeof(out), err, sizeof(err));
    if (rc == 127) {
        test_remove_dir(dir);
        cr_skip_test("man is not installed (apt-get install man-db)");
    }
    /* man -l resolves ".so man3/X.3" from the top of the hierarchy, as an
     * installed man does: hence `cd man`. */
    for (int f = -1; f < nf; f++) {
        char rel[128];
        if (f < 0) put(rel, sizeof(rel), "hilock.3");
        else put(rel, sizeof(rel), "man3/%s.3", files[f]);
        put(cmd, sizeof(cmd), "man --warnings -l %s", rel);
        rc = run_in_man(dir, cmd, out, sizeof(out), err, sizeof(err));
        cr_expect_eq(rc, 0, "man -l man/%s exited with %d:\n%s", rel, rc, err);
        cr_expect_str_eq(err, "", "man -l man/%s warns:\n%s", rel, err);
        cr_expect_not_null(strstr(out, "NAME"), "man -l man/%s shows no NAME:\n%s", rel, out);
        cr_expect_not_null(strstr(out, "SYNOPSIS"), "man -l man/%s shows no SYNOPSIS:\n%s", rel, out);
    }
    /* whatis: lexgrog reads "name \- what" for every name of each page. */
    rc = run_in_man(dir, "command -v lexgrog >/dev/null || exit 127", out, sizeof(out), err, sizeof(err));
    if (rc != 127) {
        for (int f = 0; f < nf; f++) {
            char target[256], names[64][64], why[512];
            char *page = read_page(files[f], target, sizeof(target));
            if (page == NULL || target[0] != '\0') { free(page); continue; }
            int n = name_list(page, names, 64, why, sizeof(why));
            free(page);
            put(cmd, sizeof(cmd), "lexgrog man3/%s.3", files[f]);
            rc = run_in_man(dir, cmd, out, sizeof(out), err, sizeof(err));
            cr_expect_eq(rc, 0, "lexgrog man/man3/%s.3 exited with %d:\n%s%s", files[f], rc, out, err);
            for (int i = 0; i < n; i++) {
                char want[160];
                put(want, sizeof(want), ": \"%s - ", names[i]);
                cr_expect_not_null(strstr(out, want), "lexgrog man/man3/%s.3 has no %s...\" line:\n%s",
                                   files[f], want, out);
            }
        }
    }
    test_remove_dir(dir);
}
