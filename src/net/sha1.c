/* SHA-1, for the scripts a caller gives at run time (hilock_script_new):
 * EVALSHA names a script by the SHA-1 of its text, as Redis computes it.
 * Not for security: Redis's script cache is all it serves. FIPS 180-4. */
#include <stdint.h>
#include <string.h>
#include "net/net.h"

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void block(uint32_t h[5], const unsigned char *p) {
    uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
        else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
        else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
        else f = b ^ c ^ d, k = 0xCA62C1D6;
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void hl_sha1_hex(const char *data, size_t len, char out[41]) {
    static const char hex[] = "0123456789abcdef";
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    const unsigned char *p = (const unsigned char *)data;
    unsigned char last[128] = {0};
    size_t full = len / 64 * 64, rest = len - full;
    for (size_t i = 0; i < full; i += 64) block(h, p + i);
    /* The tail, 0x80, zeros, and the length in bits, big-endian: one
     * block, or two when fewer than 9 bytes are left in the first. */
    memcpy(last, p + full, rest);
    last[rest] = 0x80;
    size_t n = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) last[n - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < n; i += 64) block(h, last + i);
    for (int i = 0; i < 20; i++) {
        unsigned char b = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[b >> 4];
        out[2 * i + 1] = hex[b & 15];
    }
    out[40] = '\0';
}
