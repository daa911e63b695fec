// render_svg: a well-formed SVG document holding every series, ticks and labels; PlotWriter writes it atomically.

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Minimal XML well-formedness: every start tag is closed in order (self-closing tags aside), nothing is left open.
bool balanced_tags(const std::string& xml) {
  std::vector<std::string> open;
  const std::regex tag("<(/?)([a-zA-Z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    if (m[3] == "/") continue;
    if (m[1] == "/") {
      if (open.empty() || open.back() != m[2]) return false;
      open.pop_back();
    } else {
      open.push_back(m[2]);
    }
  }
  return open.empty();
}

TEST(SvgChart, WellFormedWithSeriesTicksLabelsAndEscapedText) {
  LineChart chart{"loss <a&b>", "epoch", "loss", {1, 2, 3, 4}, {{"train", {3, 2, 1.5, 1}}, {"test", {4, NAN, 2, 1.8}}}};
  const std::string svg = render_svg({chart, LineChart{"accuracy", "epoch", "accuracy", {1, 2}, {{"test", {0.5, 1}}}}});
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\"", 0), 0u);
  EXPECT_TRUE(balanced_tags(svg.substr(svg.find("<svg"))));
  EXPECT_NE(svg.find("width=\"960\""), std::string::npos);
  EXPECT_NE(svg.find("loss &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"train\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"test\""), std::string::npos);
  EXPECT_NE(svg.find(">epoch</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.5</text>"), std::string::npos);  // a y tick
  // The NaN splits the test series into two polylines; the train series is one.
  const std::string test_group = svg.substr(svg.find("data-name=\"test\""));
  EXPECT_EQ(std::regex_search(test_group.substr(0, test_group.find("</g>")), std::regex("polyline[^]*polyline")), true);
  EXPECT_ERROR(render_svg({}), "render_svg: no charts");
  EXPECT_ERROR(render_svg({LineChart{"t", "x", "y", {1, 1}, {}}}), "has x value 1 at position 1");
  EXPECT_ERROR(render_svg({LineChart{"t", "x", "y", {1, 2}, {{"s", {1}}}}}), "series \"s\" of chart 0 has 1 values");
}

TEST(PlotWriter, RefusesAnUnwritablePathAndKeepsALinkALink) {
  EXPECT_ERROR(PlotWriter("/nonexistent-dir/plot.svg"), "PlotWriter");
  const std::string target = testing::scratch_path("plot.svg");
  const std::string link = target + ".link";
  std::ofstream(target) << "old";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  Dataset data{{"x"}, "y", {0, 1, 2, 3}, {0, 1, 2, 3}};
  manual_seed(0);
  Trainer trainer(make_mlp(1, 2), {.devices = {Device::cpu(0)}, .epochs = 2});
  trainer.add_callback(std::make_shared<PlotWriter>(link));
  trainer.fit(data, data);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  std::ifstream file(target);
  const std::string svg((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find(">R^2</text>"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"test\""), std::string::npos);
  std::filesystem::remove(link);
  std::filesystem::remove(target);
}

}  // namespace
}  // namespace tandem::trainers
