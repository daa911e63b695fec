#include "tandem/trainers/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

constexpr double kWidth = 480.0;  // of one chart
constexpr double kHeight = 320.0;
constexpr double kLeft = 70.0;  // margins around the plot area
constexpr double kRight = 16.0;
constexpr double kTop = 52.0;  // the title, then the legend's row
constexpr double kBottom = 48.0;
constexpr const char* kColours[] = {kTrainColour, kTestColour, "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
constexpr size_t kDotsUpTo = 40;  // points drawn as dots too when a series has at most this many

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  }
  return out;
}

// An axis from `low` to `high` widened to whole ticks of a step of 1, 2 or 5 times a power of ten, about 5 of them.
struct Axis {
  double low;
  double high;
  double step;

  static Axis covering(double low, double high) {
    if (!(high > low)) {  // one value (or none): a unit around it
      const double pad = low == 0.0 || !std::isfinite(low) ? 1.0 : std::abs(low) * 0.1;
      low = std::isfinite(low) ? low - pad : 0.0;
      high = low + 2.0 * pad;
    }
    const double rough = (high - low) / 5.0;
    const double power = std::pow(10.0, std::floor(std::log10(rough)));
    const double fraction = rough / power;
    const double step = (fraction < 1.5 ? 1.0 : fraction < 3.5 ? 2.0 : fraction < 7.5 ? 5.0 : 10.0) * power;
    return {std::floor(low / step) * step, std::ceil(high / step) * step, step};
  }
  std::vector<double> ticks() const {
    std::vector<double> values;
    for (double t = low; t <= high + step * 1e-9; t += step) values.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    return values;
  }
  // The coordinate of `value` on a span from `from` (at low) to `to` (at high).
  double place(double value, double from, double to) const { return from + (value - low) / (high - low) * (to - from); }
};

// A logarithmic axis, in log10 units: whole decades around [low, high] (positive values), ticks at each decade and,
// over at most two decades, at 2 and 5 times them too.
struct LogAxis {
  Axis decades;  // low and high in log10 units, step 1

  static LogAxis covering(double low, double high) {
    if (!(low > 0.0) || !std::isfinite(low)) return {{0.0, 1.0, 1.0}};  // no positive value: one decade
    const double first = std::floor(std::log10(low));
    double last = std::ceil(std::log10(high));
    if (last <= first) last = first + 1.0;
    return {{first, last, 1.0}};
  }
  std::vector<double> ticks() const {  // the values, not their logarithms
    std::vector<double> values;
    const bool fine = decades.high - decades.low <= 2.0;
    for (double d = decades.low; d <= decades.high + 1e-9; d += 1.0) {
      const double decade = std::pow(10.0, d);
      values.push_back(decade);
      if (fine && d < decades.high - 1e-9) {
        values.push_back(2.0 * decade);
        values.push_back(5.0 * decade);
      }
    }
    return values;
  }
  double place(double value, double from, double to) const { return decades.place(std::log10(value), from, to); }
};

// A chart's y axis, linear or logarithmic, behind one interface.
struct YAxis {
  bool log;
  Axis linear;
  LogAxis logarithmic;

  bool shows(double value) const { return std::isfinite(value) && (!log || value > 0.0); }
  std::vector<double> ticks() const { return log ? logarithmic.ticks() : linear.ticks(); }
  double place(double value, double from, double to) const {
    return log ? logarithmic.place(value, from, to) : linear.place(value, from, to);
  }
};

void check_chart(const LineChart& chart, size_t index) {
  TANDEM_CHECK(!chart.x.empty(), "render_svg: chart ", index, " (\"", excerpt(chart.title), "\") has no x values");
  for (size_t i = 0; i < chart.x.size(); ++i) {
    TANDEM_CHECK(std::isfinite(chart.x[i]) && (i == 0 || chart.x[i] > chart.x[i - 1]), "render_svg: chart ", index,
                 " has x value ", chart.x[i], " at position ", i, " but expected finite, increasing values");
  }
  for (const ChartSeries& series : chart.series) {
    TANDEM_CHECK(series.y.size() == chart.x.size(), "render_svg: series \"", excerpt(series.name), "\" of chart ",
                 index, " has ", series.y.size(), " values but the chart has ", chart.x.size(), " x values");
  }
}

std::string draw_chart(const LineChart& chart, double left) {
  const Axis x_axis = Axis::covering(chart.x.front(), chart.x.back());
  double y_low = INFINITY;
  double y_high = -INFINITY;
  YAxis y_axis{chart.log_y, {}, {}};
  for (const ChartSeries& series : chart.series) {
    for (double y : series.y) {
      if (!y_axis.shows(y)) continue;
      y_low = std::min(y_low, y);
      y_high = std::max(y_high, y);
    }
  }
  if (chart.log_y) {
    y_axis.logarithmic = LogAxis::covering(y_low, y_high);
  } else {
    y_axis.linear = Axis::covering(y_low, y_high);
  }
  const double x0 = left + kLeft;
  const double x1 = left + kWidth - kRight;
  const double y0 = kHeight - kBottom;  // the bottom of the plot area (SVG's y grows downwards)
  const double y1 = kTop;

  std::string svg = "<g class=\"chart\">\n";
  svg += "<text x=\"" + number((x0 + x1) / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" +
         escaped(chart.title) + "</text>\n";
  for (double tick : y_axis.ticks()) {
    const std::string y = number(y_axis.place(tick, y0, y1));
    svg += "<line x1=\"" + number(x0) + "\" y1=\"" + y + "\" x2=\"" + number(x1) + "\" y2=\"" + y +
           "\" stroke=\"#e0e0e0\"/>\n";
    svg += "<text x=\"" + number(x0 - 6) + "\" y=\"" + y + "\" text-anchor=\"end\" dominant-baseline=\"middle\">" +
           number(tick) + "</text>\n";
  }
  for (double tick : x_axis.ticks()) {
    const std::string x = number(x_axis.place(tick, x0, x1));
    svg += "<line x1=\"" + x + "\" y1=\"" + number(y0) + "\" x2=\"" + x + "\" y2=\"" + number(y0 + 5) +
           "\" stroke=\"black\"/>\n";
    svg += "<text x=\"" + x + "\" y=\"" + number(y0 + 18) + "\" text-anchor=\"middle\">" + number(tick) + "</text>\n";
  }
  svg += "<polyline points=\"" + number(x0) + "," + number(y1) + " " + number(x0) + "," + number(y0) + " " +
         number(x1) + "," + number(y0) + "\" fill=\"none\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + number((x0 + x1) / 2) + "\" y=\"" + number(kHeight - 10) + "\" text-anchor=\"middle\">" +
         escaped(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(" + number(left + 16) + "," + number((y0 + y1) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escaped(chart.y_label) + "</text>\n";

  for (size_t s = 0; s < chart.series.size(); ++s) {
    const ChartSeries& series = chart.series[s];
    const std::string colour = series.colour.empty() ? kColours[s % std::size(kColours)] : series.colour;
    svg += "<g class=\"series\" data-name=\"" + escaped(series.name) + "\" stroke=\"" + colour + "\" fill=\"" + colour +
           "\">\n";
    std::string points;  // one polyline per run of finite values
    const auto flush = [&] {
      if (!points.empty()) svg += "<polyline points=\"" + points + "\" fill=\"none\" stroke-width=\"1.5\"/>\n";
      points.clear();
    };
    for (size_t i = 0; i < chart.x.size(); ++i) {
      if (!y_axis.shows(series.y[i])) {
        flush();
        continue;
      }
      const std::string point =
          number(x_axis.place(chart.x[i], x0, x1)) + "," + number(y_axis.place(series.y[i], y0, y1));
      points += (points.empty() ? "" : " ") + point;
      if (chart.x.size() <= kDotsUpTo) {
        const size_t comma = point.find(',');
        svg += "<circle cx=\"" + point.substr(0, comma) + "\" cy=\"" + point.substr(comma + 1) + "\" r=\"2\"/>\n";
      }
    }
    flush();
    // The legend: one row above the plot area, entries from its left edge, so that it never covers a curve.
    const double legend_y = kTop - 12.0;
    const double legend_x = x0 + 110.0 * static_cast<double>(s);
    svg += "<line x1=\"" + number(legend_x) + "\" y1=\"" + number(legend_y) + "\" x2=\"" + number(legend_x + 20) +
           "\" y2=\"" + number(legend_y) + "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + number(legend_x + 26) + "\" y=\"" + number(legend_y) +
           "\" dominant-baseline=\"middle\" stroke=\"none\" fill=\"black\">" + escaped(series.name) + "</text>\n";
    svg += "</g>\n";
  }
  return svg + "</g>\n";
}

}  // namespace

std::string render_svg(const std::vector<LineChart>& charts) {
  TANDEM_CHECK(!charts.empty(), "render_svg: no charts");
  for (size_t i = 0; i < charts.size(); ++i) check_chart(charts[i], i);
  const std::string width = number(kWidth * static_cast<double>(charts.size()));
  const std::string height = number(kHeight);
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    width + "\" height=\"" + height + "\" viewBox=\"0 0 " + width + " " + height +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"" + width + "\" height=\"" + height + "\" fill=\"white\"/>\n";
  for (size_t i = 0; i < charts.size(); ++i) svg += draw_chart(charts[i], kWidth * static_cast<double>(i));
  return svg + "</svg>\n";
}

}  // namespace tandem::trainers
