// render_svg: a well-formed SVG document holding every series, ticks and labels; PlotWriter writes it atomically.

#include <algorithm>
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

// A log axis: decades (with 2 and 5 between them over few decades), values <= 0 left out; a series keeps the colour
// it names whatever its position; the legend sits above the plot area, which starts at y = 52.
TEST(SvgChart, LogAxesColoursAndALegendAboveThePlot) {
  LineChart wide{"loss", "epoch", "mse", {1, 2, 3, 4}, {{"train", {5000, 300, 20, 0.5}}}};
  wide.log_y = true;
  LineChart narrow{"loss", "epoch", "mse", {1, 2, 3}, {{"test", {30, 0, 12}, kTestColour}}};
  narrow.log_y = true;
  const std::string svg = render_svg({wide, narrow});
  for (const char* tick : {">0.1</text>", ">1</text>", ">10</text>", ">100</text>", ">1000</text>", ">10000</text>",
                           ">20</text>", ">50</text>"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  EXPECT_EQ(svg.find(">200</text>"), std::string::npos) << "no 2s and 5s over five decades";
  const std::string test_group = svg.substr(svg.find("data-name=\"test\""));
  EXPECT_EQ(test_group.find("stroke=\"" + std::string(kTestColour) + "\""), std::string("data-name=\"test\" ").size())
      << "the test series, first in its chart, is drawn in the test colour: " << test_group.substr(0, 80);
  const std::regex legend_line("<line x1=\"[0-9.]+\" y1=\"40\" x2=\"[0-9.]+\" y2=\"40\" stroke-width=\"2\"/>");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), legend_line), std::sregex_iterator()), 2);
  // The 0 of the narrow chart is a gap: two polylines in its series.
  const std::string narrow_series = test_group.substr(0, test_group.find("</g>"));
  EXPECT_TRUE(std::regex_search(narrow_series, std::regex("polyline[^]*polyline")));
}

// Note [Paced file writes]: drawn after the first epoch, then not again within the interval, and at the last epoch.
TEST(PlotWriter, RedrawsAtMostEveryIntervalAndAtTheEnd) {
  const std::string path = testing::scratch_path("paced_plot.svg");
  struct Peek : Callback {
    std::string path;
    std::vector<size_t> dots;  // the image's points at each epoch's end
    void on_epoch_end(const Trainer&, const EpochReport&) override {
      std::ifstream file(path);
      const std::string svg((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
      size_t count = 0;
      for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++count;
      dots.push_back(count);
    }
  };
  auto peek = std::make_shared<Peek>();
  peek->path = path;
  TableDataset data{{"x"}, "y", {0, 1, 2, 3}, {0, 1, 2, 3}};
  manual_seed(0);
  Trainer trainer(make_mlp(1, 2), {.devices = {Device::cpu(0)}, .epochs = 4});
  trainer.add_callback(std::make_shared<PlotWriter>(path, std::chrono::hours(1)));
  trainer.add_callback(peek);
  trainer.fit(data, data);
  // Each drawing holds one dot per epoch and series (train and test loss, test R^2): 3 per epoch drawn.
  EXPECT_EQ(peek->dots, (std::vector<size_t>{3, 3, 3, 12}));
  std::filesystem::remove(path);
}

TEST(PlotWriter, RefusesAnUnwritablePathAndKeepsALinkALink) {
  EXPECT_ERROR(PlotWriter("/nonexistent-dir/plot.svg"), "PlotWriter");
  const std::string target = testing::scratch_path("plot.svg");
  const std::string link = target + ".link";
  std::ofstream(target) << "old";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  TableDataset data{{"x"}, "y", {0, 1, 2, 3}, {0, 1, 2, 3}};
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
