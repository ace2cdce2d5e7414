/* Unit tests for SHA-1 (src/net/sha1.c), which names a caller's script for
 * EVALSHA: FIPS 180 examples, every padding boundary against the scripts
 * that the build hashed with sha1sum, and a million bytes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"
#include "prim/prim.h"

static void expect_sha(const char *data, size_t len, const char *want) {
    char got[41];
    hl_sha1_hex(data, len, got);
    cr_expect_str_eq(got, want, "SHA-1 of %zu bytes", len);
}

Test(unit_sha1, fips_examples) {
    expect_sha("", 0, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    expect_sha("abc", 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect_sha(two, strlen(two), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    char *million = malloc(1000000);
    cr_assert_not_null(million);
    memset(million, 'a', 1000000);
    expect_sha(million, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    free(million);
}

/* The tail's padding takes one block or two: lengths 55, 56, 63, 64, 65
 * around the edges, against sums computed once with sha1sum. */
Test(unit_sha1, padding_edges) {
    char buf[130];
    memset(buf, 'x', sizeof(buf));
    expect_sha(buf, 55, "cef734ba81a024479e09eb5a75b6ddae62e6abf1");
    expect_sha(buf, 56, "901305367c259952f4e7af8323f480d59f81335b");
    expect_sha(buf, 63, "0ddc4e0cccd9a12850deb5abb0853a4425559fec");
    expect_sha(buf, 64, "bb2fa3ee7afb9f54c6dfb5d021f14b1ffe40c163");
    expect_sha(buf, 65, "78c741ddc482e4cdf8c474a0876347a0905b6233");
    expect_sha(buf, 128, "150fa3fbdc899bd0b8f95a9fb6027f564d953762");
}

/* The build named hilock's own scripts with sha1sum: the same sums. */
Test(unit_sha1, agrees_with_the_builds_sums) {
    const hl_script *all[] = {&hl_script_mutex_acquire, &hl_script_mutex_release,
                              &hl_script_mutex_renew_many, &hl_script_mutex_join,
                              &hl_script_sem_acquire, &hl_script_rw_acquire,
                              &hl_script_fair_acquire, &hl_script_mutex_check};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        expect_sha(all[i]->body, strlen(all[i]->body), all[i]->sha);
}
