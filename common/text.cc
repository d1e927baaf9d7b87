#include "common/text.h"

#include <cstdio>

namespace kp {

namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

}  // namespace

std::string EscapeControl(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!IsControl(c)) {
      out += ch;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case 0x1b: out += "\\e"; break;
      case 0: out += "\\0"; break;
      default: {
        char buf[5];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
    }
  }
  return out;
}

std::string QuoteBounded(std::string_view s, std::size_t max_bytes) {
  std::string escaped = EscapeControl(s);
  if (escaped.size() <= max_bytes) return escaped;
  // Cut on a UTF-8 boundary, so the line stays valid text.
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(escaped[cut]) & 0xc0) == 0x80) --cut;
  const std::size_t left = escaped.size() - cut;
  escaped.resize(cut);
  return escaped + " ... (" + std::to_string(left) + " more bytes)";
}

std::string OneLine(std::string_view message) { return QuoteBounded(message, kMaxErrorLineBytes); }

Status CheckName(const std::string& field, std::string_view s) {
  bool ok = !s.empty() && s.size() <= kMaxNameBytes && s.front() != ' ' && s.back() != ' ';
  for (const char ch : s) ok = ok && ch >= 0x20 && ch <= 0x7e;
  if (ok) return Status::Ok();
  return Status::InvalidArgument(field + ": must be 1 to " + std::to_string(kMaxNameBytes) +
                                 " printable ASCII characters, not starting or ending with a space, got \"" +
                                 QuoteBounded(s) + "\" (" + std::to_string(s.size()) + " bytes)");
}

Status CheckText(const std::string& field, std::string_view s) {
  bool ok = s.size() <= kMaxTextFieldBytes;
  for (const char ch : s) ok = ok && (ch == '\t' || !IsControl(static_cast<unsigned char>(ch)));
  if (ok) return Status::Ok();
  return Status::InvalidArgument(field + ": must be at most " + std::to_string(kMaxTextFieldBytes) +
                                 " bytes of text without control characters, got \"" + QuoteBounded(s) + "\" (" +
                                 std::to_string(s.size()) + " bytes)");
}

}  // namespace kp
