#pragma once
// Line charts as a self-contained SVG document (no scripts, no external resources), which a browser shows as it is.

#include <string>
#include <vector>

namespace tandem::trainers {

struct ChartSeries {
  std::string name;       // the legend's text
  std::vector<double> y;  // one value per x of the chart; non-finite values leave a gap
  std::string colour;     // an SVG colour ("#d62728"); empty: the palette's, by the series' position
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<double> x;  // increasing
  std::vector<ChartSeries> series;
  bool log_y = false;  // a logarithmic y axis (decades); values <= 0 leave a gap there
};

// The palette's first two colours, for series that keep their colour whatever else a chart holds.
inline constexpr const char* kTrainColour = "#1f77b4";
inline constexpr const char* kTestColour = "#d62728";

// The charts side by side, each with its title, axes with about five "nice" ticks (1, 2 or 5 times a power of ten;
// on a log axis the decades, with 2 and 5 between them when there are few) and their labels, one polyline per series
// (a <g class="series" data-name="..."> holding it, drawn in the series' colour, a dot per point when there are few),
// and a legend in one row between the title and the plot area, where it covers no curve. Text is XML-escaped.
// Errors: no charts; a chart without x values, with x values that are not finite and increasing, or with a series
// whose length is not x's.
std::string render_svg(const std::vector<LineChart>& charts);

}  // namespace tandem::trainers
