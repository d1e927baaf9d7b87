// Escaping text for the SVG and HTML the project writes (Gantt charts,
// plots, the report page).
#ifndef KIMI_PLAN_COMMON_XML_H_
#define KIMI_PLAN_COMMON_XML_H_

#include <string>

namespace kp {

/// &, <, >, " escaped for XML text and attributes.
std::string EscapeXml(const std::string& s);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_XML_H_
