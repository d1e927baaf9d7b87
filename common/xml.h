// Escaping text for the SVG and HTML the project writes (Gantt charts,
// plots, the report page).
#ifndef KIMI_PLAN_COMMON_XML_H_
#define KIMI_PLAN_COMMON_XML_H_

#include <string>

namespace kp {

/// &, <, >, " escaped for XML text and attributes; control bytes other
/// than a line break and a tab, which XML cannot hold, written as "\xNN".
std::string EscapeXml(const std::string& s);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_XML_H_
