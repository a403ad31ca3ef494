// Escaping a peer's text for a log line (see untrusted_text.h).
#include "collectives/untrusted_text.h"

#include <cstdint>
#include <algorithm>
#include <cstdio>

namespace tandem {
namespace {

// The length of the well-formed UTF-8 sequence at text[i] (2 to 4 bytes, no overlong
// form, no surrogate, at most U+10FFFF), and its code point; 0 when there is none.
size_t utf8_sequence(std::string_view text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  code_point = cp;
  return n;
}

// Code points that are well-formed but control how text is shown rather than being text.
bool hides_or_moves_text(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) ||      // C1 controls (CSI 0x9B starts an escape sequence)
         (cp >= 0x200B && cp <= 0x200F) ||  // zero-width space and joiners, direction marks
         (cp >= 0x2028 && cp <= 0x202E) ||  // line and paragraph separators, bidi embeddings
         (cp >= 0x2060 && cp <= 0x2069) ||  // word joiner, invisible operators, bidi isolates
         cp == 0xFEFF;                      // byte-order mark
}

void append_hex(std::string& out, uint8_t b) {
  char hex[5];
  std::snprintf(hex, sizeof(hex), "\\x%02X", b);
  out += hex;
}

std::string escape(std::string_view text, size_t max_bytes, bool quote) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    size_t n = 1;
    uint32_t cp = b;
    if (b >= 0x80) n = utf8_sequence(text, i, cp);
    if (i + (n ? n : 1) > max_bytes) break;  // cut before a character that would cross the limit
    if (n == 0) {
      append_hex(out, b);
      i += 1;
    } else if (n > 1) {
      if (hides_or_moves_text(cp)) {
        for (size_t k = 0; k < n; ++k) append_hex(out, static_cast<uint8_t>(text[i + k]));
      } else {
        out.append(text.substr(i, n));
      }
      i += n;
    } else {
      if (b == '\\') {
        out += "\\\\";
      } else if (quote && b == '\'') {
        out += "\\'";
      } else if (b >= 0x20 && b < 0x7F) {
        out += static_cast<char>(b);
      } else {
        append_hex(out, b);
      }
      i += 1;
    }
  }
  if (quote) out = "'" + out + "'";
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace

std::string escape_untrusted(std::string_view text, size_t max_bytes) { return escape(text, max_bytes, false); }
std::string quote_untrusted(std::string_view text, size_t max_bytes) { return escape(text, max_bytes, true); }

}  // namespace tandem
