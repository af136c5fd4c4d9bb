// Text for XML and HTML documents written by hand (the simulator's SVG
// charts, `ferry graph`'s page).
#pragma once

#include <string>
#include <string_view>

namespace ferry::markup {

// `text` escaped for an XML/HTML text node or a quoted attribute value:
// & < > " ' become entities (&#39; for the apostrophe, which HTML 4 lacks as
// &apos;), and control characters other than tab and newline, which XML 1.0
// does not allow, are dropped.
std::string Escape(std::string_view text);

}  // namespace ferry::markup
