// Text that came from a user or a file, made safe for where it is written:
// a terminal (no escape sequence reaches it), one error line (no line break,
// a bounded length), and the names that end up in job scripts, the store
// and reports (printable and short, checked where they are read).
#ifndef KIMI_PLAN_COMMON_TEXT_H_
#define KIMI_PLAN_COMMON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kp {

/// The longest name read from a file or a flag (a model, GPU, topology or
/// validation case): 128 bytes.
inline constexpr std::size_t kMaxNameBytes = 128;
/// The longest free-text field of a preset file (its "source", "notes"):
/// 4096 bytes.
inline constexpr std::size_t kMaxTextFieldBytes = 4096;
/// The longest error line a command prints: 1000 bytes; a longer message is
/// cut and says how much was left out.
inline constexpr std::size_t kMaxErrorLineBytes = 1000;

/// `s` with every control byte (below 0x20, and 0x7f) written as a visible
/// escape: \n, \r, \t, \e (ESC), \0 and \xNN for the rest. Printable bytes,
/// UTF-8 sequences included, are kept as they are; a backslash is kept too,
/// so the escape is for a reader's eyes, not to be parsed back.
std::string EscapeControl(std::string_view s);

/// `s` escaped (EscapeControl) and cut to at most `max_bytes` of it, with
/// " ... (N more bytes)" when cut: a value quoted into a message.
std::string QuoteBounded(std::string_view s, std::size_t max_bytes = 80);

/// An error or warning as exactly one bounded line: EscapeControl, then cut
/// at kMaxErrorLineBytes.
std::string OneLine(std::string_view message);

/// Ok when `s` is a name: 1 to kMaxNameBytes bytes, each printable ASCII
/// (0x20-0x7e), not starting or ending with a space. Else InvalidArgument
/// "FIELD: must be 1 to 128 printable ASCII characters, got ..." with the
/// value quoted escaped and bounded.
Status CheckName(const std::string& field, std::string_view s);

/// Ok when `s` is free text: at most kMaxTextFieldBytes bytes and no control
/// byte other than a tab. Else InvalidArgument naming `field`.
Status CheckText(const std::string& field, std::string_view s);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_TEXT_H_
