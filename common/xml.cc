#include "common/xml.h"

#include "common/text.h"

namespace kp {

std::string EscapeXml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n':
      case '\t': out += c; break;
      // XML 1.0 has no other control characters, not even as references:
      // shown escaped, as the terminal shows them.
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += EscapeControl(std::string_view(&c, 1));
        else out += c;
    }
  }
  return out;
}

}  // namespace kp
