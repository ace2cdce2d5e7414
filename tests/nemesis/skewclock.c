/* libskewclock.so: an LD_PRELOAD library that skews a process's wall clock
 * (CLOCK_REALTIME and CLOCK_REALTIME_COARSE of clock_gettime, gettimeofday,
 * time) and nothing else, for hilock-nemesis's clock faults on
 * redis-server (which expires keys by its wall clock).
 *
 * The control file, named by SKEWCLOCK_FILE, holds two numbers:
 *
 *     RATE_PPM OFFSET_MS
 *
 * RATE_PPM: how much faster (or slower, < 0) the skewed clock runs, in parts
 * per million, from the moment the rate was read; OFFSET_MS: a step added
 * to the clock, counted as a total (writing 0 0 after 0 5000 steps back by
 * 5 s). The file is read again at most every 10 ms. A change of rate keeps
 * the skewed clock continuous: it runs at the new rate from the value it
 * had then.
 *
 * Why not libfaketime: it deadlocks Debian's redis-server (its dlsym calls
 * the allocator, jemalloc, from inside jemalloc's own initialisation).
 * This library calls no allocator and no dlsym: the real clock is the
 * clock_gettime system call, and the file is read with open/read/close. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REREAD_NS 10000000LL /* 10 ms */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t base_real;   /* real ns when the rate was last set */
static int64_t base_skewed; /* skewed ns then (offset included) */
static long rate_ppm;
static long long offset_ms;
static int64_t next_read;   /* CLOCK_MONOTONIC ns of the next read */
static int started;

static int64_t sys_now(clockid_t clk) {
    struct timespec ts;
    if (syscall(SYS_clock_gettime, clk, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t skewed_at(int64_t real) {
    int64_t d = real - base_real;
    return base_skewed + d + (int64_t)((__int128)d * rate_ppm / 1000000);
}

/* "RATE OFFSET" from the control file; 0 when it cannot be read. */
static int read_control(long *rate, long long *offset) {
    const char *path = getenv("SKEWCLOCK_FILE");
    char buf[64];
    if (path == NULL) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long r = strtol(buf, &end, 10);
    if (end == buf) return 0;
    char *p = end;
    long long o = strtoll(p, &end, 10);
    if (end == p) o = 0;
    *rate = r;
    *offset = o;
    return 1;
}

/* The real realtime clock moved onto the skewed one, in ns. */
static int64_t skewed_now(clockid_t clk) {
    int64_t real = sys_now(clk);
    pthread_mutex_lock(&mu);
    if (!started) {
        started = 1;
        base_real = real;
        base_skewed = real;
    }
    int64_t mono = sys_now(CLOCK_MONOTONIC);
    if (mono >= next_read) {
        long r;
        long long o;
        next_read = mono + REREAD_NS;
        if (read_control(&r, &o) && (r != rate_ppm || o != offset_ms)) {
            int64_t now = skewed_at(real);
            base_real = real;
            base_skewed = now + (o - offset_ms) * 1000000LL;
            rate_ppm = r;
            offset_ms = o;
        }
    }
    int64_t s = skewed_at(real);
    pthread_mutex_unlock(&mu);
    return s;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE) return (int)syscall(SYS_clock_gettime, clk, ts);
    int64_t ns = skewed_now(clk);
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    int64_t ns = skewed_now(CLOCK_REALTIME);
    tv->tv_sec = (time_t)(ns / 1000000000LL);
    tv->tv_usec = (suseconds_t)(ns % 1000000000LL / 1000);
    return 0;
}

time_t time(time_t *t) {
    time_t s = (time_t)(skewed_now(CLOCK_REALTIME_COARSE) / 1000000000LL);
    if (t != NULL) *t = s;
    return s;
}
