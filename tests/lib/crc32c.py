"""CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of bytes, as baton's journal,
checkpoint manifests, holder records and TensorBoard files carry it. Bitwise: slow, but the
tests hash small records only."""


def crc32c(data):
    c = 0xFFFFFFFF
    for x in data:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
