// The one place durations, sizes and HTML text are formatted.
#include "models/text_format.h"

#include <gtest/gtest.h>

namespace shardplan {
namespace {

TEST(FormatSeconds, PicksTheUnitThatReadsBest) {
  EXPECT_EQ(format_seconds(1.5), "1.500 s");
  EXPECT_EQ(format_seconds(0.0123456), "12.35 ms");
  EXPECT_EQ(format_seconds(0.001), "1.00 ms");
  EXPECT_EQ(format_seconds(56.7e-6), "56.7 us");
  EXPECT_EQ(format_seconds(-0.002), "-2.00 ms");  // a difference keeps its sign and unit
}

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(format_bytes(1.5 * 1073741824.0), "1.50 GiB");
  EXPECT_EQ(format_bytes(320), "320 B");
}

TEST(HtmlEscape, EveryCharacterThatEndsTextOrAnAttribute) {
  EXPECT_EQ(html_escape(R"(<a href="x">Tom & 'Jerry'</a>)"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape("layers.0 mb1"), "layers.0 mb1");
}

}  // namespace
}  // namespace shardplan
