// Line plots as inline SVG, drawn by ctune for the run report: axes with round ticks, one
// polyline per series, a legend, optional vertical marks (resumes) and points (skipped steps),
// optional horizontal reference lines (the ledger's predicted peak), and optionally a second
// drawing with a log-scaled y axis that the page's "log scale" switch shows instead.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ctune::report {

using Points = std::vector<std::pair<double, double>>;  // (x, y), x ascending

struct Series {
  std::string name;
  std::string colour;  // CSS colour
  Points points;
  bool dashed = false;
  bool thin = false;   // drawn lighter (raw values under a smoothed curve)
};

struct PlotOptions {
  std::string title, x_label = "step", y_label;
  bool log_toggle = false;                              // also draw a log-y version (class "log")
  std::vector<double> x_marks;                          // vertical dashed lines (resumes)
  std::vector<std::pair<double, std::string>> y_lines;  // horizontal reference lines, labelled
  Points markers;                                       // red crosses (skipped steps), drawn at their x on the bottom axis
};

// At most `max_points` points per series: the points are cut into buckets in x order and each
// bucket keeps its first, lowest and highest point, so extrema survive; fewer points pass as is.
Points downsample(const Points& points, std::size_t max_points = 1500);

// The <svg> element(s) of one plot; each series' polyline carries data-points="<count drawn>"
// and data-series="<name>".
std::string line_plot(const std::vector<Series>& series, const PlotOptions& options);

// Exponential moving average with TensorBoard's debiasing (weight 0.6 by default).
Points smoothed(const Points& points, double weight = 0.6);

std::string html_escape(const std::string& s);

}  // namespace ctune::report
