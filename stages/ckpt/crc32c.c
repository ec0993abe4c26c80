#include "crc32c.h"

#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[8][256];
static int crc32c_ready;

static void crc32c_init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] =
                (crc32c_table[t - 1][i] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
    __atomic_store_n(&crc32c_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc32c_soft(uint32_t c, const unsigned char *p, size_t n) {
    if (!__atomic_load_n(&crc32c_ready, __ATOMIC_ACQUIRE)) crc32c_init_table();
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = crc32c_table[7][w & 0xff] ^ crc32c_table[6][(w >> 8) & 0xff] ^
            crc32c_table[5][(w >> 16) & 0xff] ^ crc32c_table[4][(w >> 24) & 0xff] ^
            crc32c_table[3][(w >> 32) & 0xff] ^ crc32c_table[2][(w >> 40) & 0xff] ^
            crc32c_table[1][(w >> 48) & 0xff] ^ crc32c_table[0][w >> 56];
        p += 8, n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const unsigned char *p,
                                                            size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8, n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

static int crc32c_have_hw(void) {
    return __builtin_cpu_supports("sse4.2");
}
#else
static uint32_t crc32c_hw(uint32_t c, const unsigned char *p, size_t n) {
    return crc32c_soft(c, p, n);
}

static int crc32c_have_hw(void) {
    return 0;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    uint32_t c = ~crc;
    c = crc32c_have_hw() ? crc32c_hw(c, data, n) : crc32c_soft(c, data, n);
    return ~c;
}
