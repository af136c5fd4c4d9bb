#include "ferry/base/markup.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry::markup {
namespace {

TEST(MarkupEscape, EntitiesForTheFiveSpecialCharacters) {
  EXPECT_EQ(Escape(R"(a<b & "c" 'd'>)"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(Escape("plain, and UTF-8: \u2192"), "plain, and UTF-8: \u2192");
  EXPECT_EQ(Escape(""), "");
}

TEST(MarkupEscape, DropsControlCharactersButTabAndNewline) {
  EXPECT_EQ(Escape("a\x01"
                   "b\tc\nd\x1f"),
            "ab\tc\nd");
  EXPECT_EQ(Escape(std::string("x\0y", 3)), "xy");
}

}  // namespace
}  // namespace ferry::markup
