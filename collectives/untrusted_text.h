// Text that came from a peer (a job id in a hello, a key, a name in a record, an error a
// store sent back), made safe to put in a log line or an error message. Raw, such text
// could forge a line of its own (a newline, then "tandemrun: ... job failed"), drive the
// terminal (escape sequences) or fill the log (megabytes in one string).
//
// escape_untrusted: printable ASCII passes, and so does well-formed UTF-8 but the code
// points that move or hide text (C1 controls, line and paragraph separators, the
// bidirectional overrides and isolates, zero-width marks, the byte-order mark); every other
// byte, and each byte of those code points, is shown as \xNN, and a backslash as \\, so
// the escaped text reads back to exactly one input. Past `max_bytes` of input (cut at a
// character's start) the rest is left out and "... (N bytes)" says how long it was.
// quote_untrusted: the same between single quotes, with a quote inside shown as \'.
// Every place that logs a peer's text calls one of these two (docs/security.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

constexpr size_t kUntrustedLogBytes = 96;        // a name: a job id, a key, a host
constexpr size_t kUntrustedMessageBytes = 512;   // a sentence: an error, a reason, a line of output

std::string escape_untrusted(std::string_view text, size_t max_bytes = kUntrustedLogBytes);
std::string quote_untrusted(std::string_view text, size_t max_bytes = kUntrustedLogBytes);

}  // namespace tandem
