// parse_bytes / format_bytes: every accepted spelling and every rejection.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

constexpr std::int64_t kTiB = 1024 * kGiB;

struct GoodCase {
  const char* text;
  std::int64_t bytes;
};

class ParseBytesGood : public ::testing::TestWithParam<GoodCase> {};

TEST_P(ParseBytesGood, Parses) { EXPECT_EQ(parse_bytes(GetParam().text), GetParam().bytes) << GetParam().text; }

INSTANTIATE_TEST_SUITE_P(
    Units, ParseBytesGood,
    ::testing::Values(GoodCase{"16GiB", 16 * kGiB}, GoodCase{"16 GiB", 16 * kGiB}, GoodCase{"16gib", 16 * kGiB},
                      GoodCase{"16GB", 16'000'000'000}, GoodCase{"16 gb", 16'000'000'000},
                      GoodCase{"16G", 16 * kGiB},  // bare letters are binary
                      GoodCase{"16g", 16 * kGiB}, GoodCase{"512M", 512 * kMiB}, GoodCase{"64K", 64 * kKiB},
                      GoodCase{"2T", 2 * kTiB}, GoodCase{"16303MiB", 16303 * kMiB},
                      GoodCase{"143771 MiB", 143771 * kMiB}, GoodCase{"1.5TiB", kTiB + kTiB / 2},
                      GoodCase{"0.5GiB", kGiB / 2}, GoodCase{"1.5 GB", 1'500'000'000},
                      GoodCase{"123456", 123456}, GoodCase{"1", 1}, GoodCase{"123456B", 123456},
                      GoodCase{"100 bytes", 100}, GoodCase{"  24GiB  ", 24 * kGiB}, GoodCase{"1KB", 1000},
                      GoodCase{"1kib", 1024}, GoodCase{"2MB", 2'000'000}, GoodCase{"3TB", 3'000'000'000'000},
                      GoodCase{"1PiB", 1024 * kTiB}, GoodCase{"1024TiB", 1024 * kTiB},
                      GoodCase{"007GiB", 7 * kGiB}));

class ParseBytesBad : public ::testing::TestWithParam<const char*> {};

TEST_P(ParseBytesBad, RejectsNamingTheText) {
  const std::string text = GetParam();
  try {
    parse_bytes(text);
    FAIL() << "accepted '" << text << "'";
  } catch (const InputError& e) {
    // Quoted as errors quote what they were given: printable, a short prefix (common/text.hpp).
    EXPECT_NE(std::string(e.what()).find(detail::quoted(text)), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Units, ParseBytesBad,
                         ::testing::Values("", "   ", "-16GiB", "-1", "0", "0GiB", "0.0MiB", "0.1B", "nan", "NaN GiB",
                                           "inf", "infGiB", "1e9", "16 GiBs", "16GiB extra", "16 Gi B", "GiB",
                                           "sixteen", "16..5GiB", "1.GiB", ".5GiB", "+16GiB", "16,5GiB",
                                           "0x10GiB", "1.5.5", "2PiB", "1025TiB", "1000000TB",
                                           "99999999999999999999999", "999999999999999999999999GiB",
                                           "1.000000000000000000001GiB", "16\tGiB\n"));

TEST(Units, NoOverflowOnHugeNumbers) {
  EXPECT_THROW(parse_bytes("18446744073709551616"), InputError);
  EXPECT_THROW(parse_bytes("9223372036854775807"), InputError);
  EXPECT_THROW(parse_bytes("9223372036854775807PiB"), InputError);
  EXPECT_EQ(parse_bytes("1125899906842624"), 1024 * kTiB);  // exactly 1 PiB
  EXPECT_THROW(parse_bytes("1125899906842625"), InputError);
}

TEST(Units, EmbeddedNulIsRejected) {
  using namespace std::string_view_literals;
  EXPECT_THROW(parse_bytes("16\0GiB"sv), InputError);
}

TEST(Units, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(950 * kMiB + kMiB / 5), "950.2 MiB");
  EXPECT_EQ(format_bytes(static_cast<std::int64_t>(11.6 * static_cast<double>(kGiB))), "11.6 GiB");
  EXPECT_EQ(format_bytes(16303 * kMiB), "15.9 GiB");
  EXPECT_EQ(format_bytes(kGiB - 1), "1.0 GiB");  // not "1024.0 MiB"
  EXPECT_EQ(format_bytes(3 * kTiB), "3.0 TiB");
  EXPECT_EQ(format_bytes(-2 * kGiB), "-2.0 GiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<std::int64_t>::min()), "-8.0 EiB");
  // The largest count is where figures past int64 are held (kMostBytes): "more than", not a size.
  EXPECT_EQ(format_bytes(std::numeric_limits<std::int64_t>::max()), "more than 8 EiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<std::int64_t>::max() - 1), "8.0 EiB");
}

TEST(Units, RoundTripThroughFormat) {
  for (const char* text : {"16GiB", "24GiB", "512MiB"}) {
    EXPECT_EQ(parse_bytes(format_bytes(parse_bytes(text))), parse_bytes(text)) << text;
  }
}

}  // namespace
}  // namespace trainfit
