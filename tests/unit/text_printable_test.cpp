// printable(): text from runners and hand-edited files, fit for a terminal.
#include <gtest/gtest.h>

#include <string>

#include "common/text.hpp"

namespace trainfit::detail {
namespace {

TEST(TextPrintable, KeepsTextAndEscapesControls) {
  EXPECT_EQ(printable("qwen2.5-7b qlora r16 q,v s512 b1: peak 9709.9 MiB"), "qwen2.5-7b qlora r16 q,v s512 b1: peak 9709.9 MiB");
  EXPECT_EQ(printable(""), "");
  EXPECT_EQ(printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(printable("\x1b[2J\x1b]0;title\x07"), "\\x1b[2J\\x1b]0;title\\x07");
  EXPECT_EQ(printable(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("\\x1b stays as typed"), "\\x1b stays as typed");
}

TEST(TextPrintable, KeepsUtf8AndEscapesC1AndBrokenBytes) {
  EXPECT_EQ(printable("Grüße, 東京, 🙂, ±1σ"), "Grüße, 東京, 🙂, ±1σ");
  EXPECT_EQ(printable("\xc2\x9b" "31m"), "\\u009b31m");  // U+009B: a CSI to some terminals
  EXPECT_EQ(printable("\xc2\x80\xc2\x9f\xc2\xa0"), "\\u0080\\u009f\xc2\xa0");  // C1 escaped; no-break space kept
  EXPECT_EQ(printable("\x9b" "31m"), "\\x9b31m");  // a lone byte: a CSI to an 8-bit terminal
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("cut \xe6\x9d"), "cut \\xe6\\x9d");          // a sequence cut short
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                  // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");          // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

}  // namespace
}  // namespace trainfit::detail
