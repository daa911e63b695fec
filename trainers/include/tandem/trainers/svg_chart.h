#pragma once
// Line charts as a self-contained SVG document (no scripts, no external resources), which a browser shows as it is.

#include <string>
#include <vector>

namespace tandem::trainers {

struct ChartSeries {
  std::string name;       // the legend's text
  std::vector<double> y;  // one value per x of the chart; non-finite values leave a gap
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<double> x;  // increasing
  std::vector<ChartSeries> series;
};

// The charts side by side, each with its title, axes with about five "nice" ticks (1, 2 or 5 times a power of ten)
// and their labels, one polyline per series (a <g class="series" data-name="..."> holding it, drawn in the series'
// colour, a dot per point when there are few), and a legend. Text is XML-escaped. Errors: no charts; a chart
// without x values, with x values that are not finite and increasing, or with a series whose length is not x's.
std::string render_svg(const std::vector<LineChart>& charts);

}  // namespace tandem::trainers
