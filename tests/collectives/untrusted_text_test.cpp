// escape_untrusted / quote_untrusted (collectives/untrusted_text.h): what a peer sends
// reaches a log line as one line of visible text, never as terminal control, a forged
// line or megabytes. Exact outputs throughout.
#include <gtest/gtest.h>

#include <string>

#include "collectives/untrusted_text.h"

namespace tandem {
namespace {

TEST(UntrustedText, PrintableAsciiPassesAndBackslashesAreDoubled) {
  EXPECT_EQ(escape_untrusted("job-42 a.b_c:1"), "job-42 a.b_c:1");
  EXPECT_EQ(escape_untrusted("C:\\x1B"), "C:\\\\x1B");  // cannot pass for an escaped byte
  EXPECT_EQ(quote_untrusted("it's"), "'it\\'s'");
  EXPECT_EQ(quote_untrusted(""), "''");
}

TEST(UntrustedText, ANewlineCannotForgeALineOfItsOwn) {
  const std::string forged = "x\ntandemrun: job failed: rank 1 was killed\r\n";
  EXPECT_EQ(quote_untrusted(forged, 4096), "'x\\x0Atandemrun: job failed: rank 1 was killed\\x0D\\x0A'");
}

TEST(UntrustedText, TerminalEscapeSequencesAreShownNotObeyed) {
  EXPECT_EQ(escape_untrusted("\x1b[31mred\x1b[0m"), "\\x1B[31mred\\x1B[0m");
  EXPECT_EQ(escape_untrusted(std::string("nul\0tab\tdel\x7f", 12)), "nul\\x00tab\\x09del\\x7F");
  EXPECT_EQ(escape_untrusted("\xc2\x9b" "2J"), "\\xC2\\x9B2J");  // C1 CSI, in UTF-8
  EXPECT_EQ(escape_untrusted("\x9b" "2J"), "\\x9B2J");           // C1 CSI, a bare byte
}

TEST(UntrustedText, WellFormedUtf8PassesButNotWhatHidesOrReordersText) {
  EXPECT_EQ(escape_untrusted("n\xc5\x93ud-\xe6\x97\xa5-\xf0\x9f\x9a\x80"), "n\xc5\x93ud-\xe6\x97\xa5-\xf0\x9f\x9a\x80");
  EXPECT_EQ(escape_untrusted("a\xe2\x80\xae" "b"), "a\\xE2\\x80\\xAEb");  // U+202E right-to-left override
  EXPECT_EQ(escape_untrusted("a\xe2\x81\xa6" "b"), "a\\xE2\\x81\\xA6b");  // U+2066 left-to-right isolate
  EXPECT_EQ(escape_untrusted("a\xe2\x80\xa8" "b"), "a\\xE2\\x80\\xA8b");  // U+2028 line separator
  EXPECT_EQ(escape_untrusted("a\xe2\x80\x8b" "b"), "a\\xE2\\x80\\x8Bb");  // U+200B zero-width space
  EXPECT_EQ(escape_untrusted("\xef\xbb\xbf" "x"), "\\xEF\\xBB\\xBFx");    // byte-order mark
}

TEST(UntrustedText, MalformedUtf8IsShownByteByByte) {
  EXPECT_EQ(escape_untrusted("\xc0\xaf"), "\\xC0\\xAF");              // overlong '/'
  EXPECT_EQ(escape_untrusted("\xe0\x80\xaf"), "\\xE0\\x80\\xAF");     // overlong, 3 bytes
  EXPECT_EQ(escape_untrusted("\xed\xa0\x80"), "\\xED\\xA0\\x80");     // a surrogate
  EXPECT_EQ(escape_untrusted("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(escape_untrusted("\xe6\x97"), "\\xE6\\x97");              // cut short at the end
  EXPECT_EQ(escape_untrusted("\xe6" "ab"), "\\xE6ab");                // cut short by ASCII
  EXPECT_EQ(escape_untrusted("\xff\xfe"), "\\xFF\\xFE");
}

TEST(UntrustedText, ALongStringIsCutAndItsLengthSaid) {
  const std::string big(4096, 'k');
  EXPECT_EQ(quote_untrusted(big), "'" + std::string(kUntrustedLogBytes, 'k') + "'... (4096 bytes)");
  EXPECT_EQ(escape_untrusted(big, 3), "kkk... (4096 bytes)");
  EXPECT_EQ(escape_untrusted("abc", 3), "abc");  // exactly the limit: nothing left out
  // A character that would cross the limit is left out whole, never split.
  EXPECT_EQ(escape_untrusted("ab\xe6\x97\xa5", 4), "ab... (5 bytes)");
  // The limit counts input bytes, so escaping cannot make a cut string longer than 4x.
  const std::string controls(4096, '\x01');
  const std::string shown = escape_untrusted(controls, 8);
  EXPECT_EQ(shown, "\\x01\\x01\\x01\\x01\\x01\\x01\\x01\\x01... (4096 bytes)");
}

TEST(UntrustedText, EveryByteValueComesOutPrintable) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string shown = escape_untrusted(all, all.size());
  for (char ch : shown) {
    const auto u = static_cast<unsigned char>(ch);
    EXPECT_TRUE(u >= 0x20 && u < 0x7F) << "byte " << int(u) << " in " << shown;
  }
}

}  // namespace
}  // namespace tandem
