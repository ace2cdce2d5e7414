/* Key and channel names, hash tags and the Redis Cluster slot. */
#include <string.h>
#include "core/core.h"

/* '%', '{' and '}' are escaped so the tag has no braces (Redis takes the
 * text between the first '{' and the next '}' as the tag) and the encoding
 * stays one-to-one. */
static int needs_escape(char ch) { return ch == '%' || ch == '{' || ch == '}'; }

size_t hl_tag_len(const char *name, size_t len) {
    size_t n = len;
    for (size_t i = 0; i < len; i++)
        if (needs_escape(name[i])) n += 2;
    return n;
}

size_t hl_key_write(char *out, const char *prefix, size_t plen,
                    const char *name, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    char *p = out;
    memcpy(p, prefix, plen);
    p += plen;
    *p++ = '{';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (needs_escape((char)ch)) {
            *p++ = '%';
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        } else {
            *p++ = (char)ch;
        }
    }
    *p++ = '}';
    *p = '\0';
    return (size_t)(p - out);
}

int hl_prefix_valid(const char *prefix) {
    size_t n = strlen(prefix);
    return n <= HILOCK_PREFIX_MAX && strpbrk(prefix, "{}") == NULL;
}

int hilock_key(const char *prefix, const char *name, char *buf, size_t n) {
    if (prefix == NULL) prefix = "hilock:";
    if (name == NULL || buf == NULL || !hl_prefix_valid(prefix)) return HILOCK_EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > HILOCK_NAME_MAX) return HILOCK_EINVAL;
    size_t plen = strlen(prefix);
    if (plen + 2 + hl_tag_len(name, len) + 1 > n) return HILOCK_EINVAL;
    return (int)hl_key_write(buf, prefix, plen, name, len);
}

/* CRC16-CCITT (XMODEM), as Redis Cluster uses: poly 0x1021, init 0. */
uint16_t hl_crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned hilock_key_slot(const char *key, size_t len) {
    size_t s, e;
    for (s = 0; s < len; s++)
        if (key[s] == '{') break;
    if (s < len) {
        for (e = s + 1; e < len; e++)
            if (key[e] == '}') break;
        if (e < len && e != s + 1) return hl_crc16(key + s + 1, e - s - 1) & 16383;
    }
    return hl_crc16(key, len) & 16383;
}
