/* units.c: every accepted form against a value computed by hand, and the rejections
 * (garbage, negative where unsigned, overflow, inexact integers, inf/nan). */
#include <stdint.h>

#include "check.h"
#include "units.h"
#include "util/err.h"

static void test_uint(void) {
    uint64_t v = 0;
    CHECK(units_parse_uint("0", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 0);
    CHECK(units_parse_uint("8", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 8);
    CHECK(units_parse_uint("8K", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 8192);
    CHECK(units_parse_uint("128K", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 131072);
    CHECK(units_parse_uint("1M", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 1048576);
    CHECK(units_parse_uint("2G", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 2147483648ULL);
    CHECK(units_parse_uint("3T", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 3ULL << 40);
    CHECK(units_parse_uint("1.5K", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 1536);
    CHECK(units_parse_uint("1e3", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 1000);
    CHECK(units_parse_uint("2.5e2", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 250);
    CHECK(units_parse_uint("+7", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 7);
    CHECK(units_parse_uint("007", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 7);
    CHECK(units_parse_uint("100.000", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, 100);
    CHECK(units_parse_uint("18446744073709551615", UINT64_MAX, &v) == 0);
    CHECK_EQ_U64(v, UINT64_MAX);
    CHECK(units_parse_uint("4294967295", UINT32_MAX, &v) == 0);
    CHECK_EQ_U64(v, 4294967295ULL);

    CHECK(units_parse_uint("4294967296", UINT32_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("4G", UINT32_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("18446744073709551616", UINT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("99999999999999999999999", UINT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("16777216T", UINT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("1e20", UINT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("-1", UINT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_uint("1.5", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("1e-3", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("1.0001K", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("two", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint(" 8", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("8 ", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("8KB", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("0x10", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint(".", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("1e", UINT64_MAX, &v) == BT_EINVAL);
    CHECK(units_parse_uint("K", UINT64_MAX, &v) == BT_EINVAL);
    CHECK_EQ_U64(v, 4294967295ULL); /* failures leave *out alone */
}

static void test_int(void) {
    int64_t v = 0;
    CHECK(units_parse_int("-3", INT32_MIN, INT32_MAX, &v) == 0);
    CHECK(v == -3);
    CHECK(units_parse_int("-2G", INT32_MIN, INT32_MAX, &v) == 0);
    CHECK(v == INT32_MIN);
    CHECK(units_parse_int("-9223372036854775808", INT64_MIN, INT64_MAX, &v) == 0);
    CHECK(v == INT64_MIN);
    CHECK(units_parse_int("9223372036854775807", INT64_MIN, INT64_MAX, &v) == 0);
    CHECK(v == INT64_MAX);
    CHECK(units_parse_int("4K", INT32_MIN, INT32_MAX, &v) == 0);
    CHECK(v == 4096);
    CHECK(units_parse_int("-0", INT32_MIN, INT32_MAX, &v) == 0);
    CHECK(v == 0);
    CHECK(units_parse_int("2G", INT32_MIN, INT32_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_int("-2147483649", INT32_MIN, INT32_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_int("-9223372036854775809", INT64_MIN, INT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_int("9223372036854775808", INT64_MIN, INT64_MAX, &v) == BT_ERANGE);
    CHECK(units_parse_int("--1", INT32_MIN, INT32_MAX, &v) == BT_EINVAL);
}

static void test_double(void) {
    double v = 0;
    CHECK(units_parse_double("1e-5", &v) == 0);
    CHECK(v == 1e-5);
    CHECK(units_parse_double("3", &v) == 0);
    CHECK(v == 3.0);
    CHECK(units_parse_double("-0.25", &v) == 0);
    CHECK(v == -0.25);
    CHECK(units_parse_double(".5", &v) == 0);
    CHECK(v == 0.5);
    CHECK(units_parse_double("5.", &v) == 0);
    CHECK(v == 5.0);
    CHECK(units_parse_double("3e-4", &v) == 0);
    CHECK(v == 3e-4);
    CHECK(units_parse_double(".inf", &v) == BT_EINVAL);
    CHECK(units_parse_double("inf", &v) == BT_EINVAL);
    CHECK(units_parse_double("nan", &v) == BT_EINVAL);
    CHECK(units_parse_double("0x1p3", &v) == BT_EINVAL);
    CHECK(units_parse_double("1e999", &v) == BT_ERANGE);
    CHECK(units_parse_double("1.5x", &v) == BT_EINVAL);
    CHECK(units_parse_double(" 1", &v) == BT_EINVAL);
    CHECK(units_parse_double("", &v) == BT_EINVAL);
    CHECK(units_parse_double("1e5K", &v) == BT_EINVAL);
}

static void test_bool(void) {
    int b = -1;
    const char *yes[] = {"true", "True", "YES", "on"}, *no[] = {"false", "FALSE", "no", "Off"};
    for (int i = 0; i < 4; i++) {
        CHECK(units_parse_bool(yes[i], &b) == 0 && b == 1);
        CHECK(units_parse_bool(no[i], &b) == 0 && b == 0);
    }
    CHECK(units_parse_bool("1", &b) == BT_EINVAL);
    CHECK(units_parse_bool("y", &b) == BT_EINVAL);
    CHECK(units_parse_bool("", &b) == BT_EINVAL);
}

static void test_bytes(void) {
    uint64_t v = 0;
    CHECK(units_parse_bytes("80GB", &v) == 0);
    CHECK_EQ_U64(v, 80000000000ULL);
    CHECK(units_parse_bytes("80GiB", &v) == 0);
    CHECK_EQ_U64(v, 80ULL << 30);
    CHECK(units_parse_bytes("512MB", &v) == 0);
    CHECK_EQ_U64(v, 512000000ULL);
    CHECK(units_parse_bytes("4KiB", &v) == 0);
    CHECK_EQ_U64(v, 4096);
    CHECK(units_parse_bytes("1.5KiB", &v) == 0);
    CHECK_EQ_U64(v, 1536);
    CHECK(units_parse_bytes("1.1GB", &v) == 0);
    CHECK_EQ_U64(v, 1100000000ULL);
    CHECK(units_parse_bytes("2TB", &v) == 0);
    CHECK_EQ_U64(v, 2000000000000ULL);
    CHECK(units_parse_bytes("1TiB", &v) == 0);
    CHECK_EQ_U64(v, 1ULL << 40);
    CHECK(units_parse_bytes("12345", &v) == 0);
    CHECK_EQ_U64(v, 12345);
    CHECK(units_parse_bytes("7B", &v) == 0);
    CHECK_EQ_U64(v, 7);
    CHECK(units_parse_bytes("80 GB", &v) == 0);
    CHECK_EQ_U64(v, 80000000000ULL);
    CHECK(units_parse_bytes("16EB", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("0.5B", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("80gb", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("80Gb", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("GB", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("80GB/s", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("80 ", &v) == BT_EINVAL);
    CHECK(units_parse_bytes("-1GB", &v) == BT_ERANGE);
    CHECK(units_parse_bytes("20000PB", &v) == BT_ERANGE);
}

static void test_bandwidth(void) {
    double v = 0;
    CHECK(units_parse_bandwidth("450GB/s", &v) == 0);
    CHECK(v == 450e9);
    CHECK(units_parse_bandwidth("50GiB/s", &v) == 0);
    CHECK(v == 50.0 * 1073741824.0);
    CHECK(units_parse_bandwidth("400Gb/s", &v) == 0);
    CHECK(v == 50e9);
    CHECK(units_parse_bandwidth("100Mb/s", &v) == 0);
    CHECK_REL(v, 12.5e6, 1e-15);
    CHECK(units_parse_bandwidth("25e9", &v) == 0);
    CHECK(v == 25e9);
    CHECK(units_parse_bandwidth("1.5TB/s", &v) == 0);
    CHECK(v == 1.5e12);
    CHECK(units_parse_bandwidth("450GB", &v) == BT_EINVAL);
    CHECK(units_parse_bandwidth("450GB/h", &v) == BT_EINVAL);
    CHECK(units_parse_bandwidth("fast", &v) == BT_EINVAL);
    CHECK(units_parse_bandwidth("-1GB/s", &v) == BT_ERANGE);
    CHECK(units_parse_bandwidth("1e308TB/s", &v) == BT_ERANGE);
}

static void test_duration(void) {
    double v = 0;
    CHECK(units_parse_duration("300s", &v) == 0);
    CHECK(v == 300.0);
    CHECK(units_parse_duration("5m", &v) == 0);
    CHECK(v == 300.0);
    CHECK(units_parse_duration("1h", &v) == 0);
    CHECK(v == 3600.0);
    CHECK(units_parse_duration("2d", &v) == 0);
    CHECK(v == 172800.0);
    CHECK(units_parse_duration("250ms", &v) == 0);
    CHECK_REL(v, 0.25, 1e-15);
    CHECK(units_parse_duration("90", &v) == 0);
    CHECK(v == 90.0);
    CHECK(units_parse_duration("1.5h", &v) == 0);
    CHECK(v == 5400.0);
    CHECK(units_parse_duration("5 min", &v) == 0);
    CHECK(v == 300.0);
    CHECK(units_parse_duration("5y", &v) == BT_EINVAL);
    CHECK(units_parse_duration("s", &v) == BT_EINVAL);
    CHECK(units_parse_duration("5M", &v) == BT_EINVAL);
    CHECK(units_parse_duration("-5s", &v) == BT_ERANGE);
    CHECK(units_parse_duration("1e400s", &v) == BT_ERANGE);
}

int main(void) {
    test_uint();
    test_int();
    test_double();
    test_bool();
    test_bytes();
    test_bandwidth();
    test_duration();
    return check_status();
}
