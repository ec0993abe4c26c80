/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of checkpoint
 * shards: the SSE4.2 crc32 instruction where the CPU has it, else a slicing-by-8 table.
 * crc32c_update(0, p, n) is the CRC of p[0..n); feeding a buffer in pieces gives the same
 * value as feeding it whole. */
#ifndef BATON_CRC32C_H
#define BATON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);

#endif
