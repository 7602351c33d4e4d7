#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ctune::report {

namespace {

// The legend has its own band between the title and the plot, so it never covers a curve.
constexpr double kWidth = 640, kHeight = 260, kLeft = 64, kRight = 16, kTop = 42, kBottom = 38;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g", v);
  return b;
}
std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", v);
  return b;
}

// More ticks than this is a degenerate axis (a range at the ends of double precision): the
// loops stop there instead of running on.
constexpr std::size_t kMaxTicks = 64;
// The smallest value a log axis shows: below it powers of ten are denormal or zero, and
// multiplying zero by ten never reaches the top of the axis.
constexpr double kLogFloor = 1e-300;

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  if (!(step > 0) || !std::isfinite(step)) return t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9 && t.size() < kMaxTicks; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

struct Axis {
  double lo, hi;
  bool log;
  double map(double v, double from, double to) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi, x = log ? std::log10(std::max(v, kLogFloor)) : v;
    return from + (x - a) / (b - a) * (to - from);
  }
  std::vector<double> ticks() const {
    if (!log) return linear_ticks(lo, hi);
    std::vector<double> t;
    const int decades = static_cast<int>(std::ceil(std::log10(hi)) - std::floor(std::log10(lo)));
    for (double p = std::pow(10.0, std::floor(std::log10(lo))); p > 0 && p <= hi * 1.0001 && t.size() < kMaxTicks; p *= 10)
      for (double m : decades <= 2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1})
        if (p * m >= lo * 0.9999 && p * m <= hi * 1.0001) t.push_back(p * m);
    return t;
  }
};

// The y range of what is drawn (reference lines included), padded so lines do not touch the frame.
Axis y_axis(const std::vector<Series>& series, const PlotOptions& o, bool log) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  auto take = [&](double y) {
    if (!std::isfinite(y) || (log && y <= 0)) return;
    if (log) y = std::max(y, kLogFloor);
    lo = std::min(lo, y);
    hi = std::max(hi, y);
  };
  for (const auto& s : series)
    for (const auto& p : s.points) take(p.second);
  for (const auto& l : o.y_lines) take(l.first);
  if (!std::isfinite(lo)) return {log ? 0.1 : 0.0, 1.0, log};
  if (log) {
    if (hi / lo < 1.01) lo /= 1.5, hi *= 1.5;
    return {lo / 1.05, hi * 1.05, true};
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) lo -= 0.5 * std::max(1.0, std::abs(lo)), hi += 0.5 * std::max(1.0, std::abs(hi));
  const double pad = 0.05 * (hi - lo);
  return {lo - pad, hi + pad, false};
}

std::string draw(const std::vector<Series>& series, const PlotOptions& o, bool log, const std::string& css_class) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  for (const auto& s : series)
    for (const auto& p : s.points) x_lo = std::min(x_lo, p.first), x_hi = std::max(x_hi, p.first);
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1;
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  const Axis x{x_lo, x_hi, false}, y = y_axis(series, o, log);
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  std::string s = "<svg class=\"plot " + css_class + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(kWidth) +
                  "\" height=\"" + px(kHeight) + "\" viewBox=\"0 0 " + px(kWidth) + " " + px(kHeight) + "\" role=\"img\" aria-label=\"" +
                  html_escape(o.title) + "\">\n";
  s += "<text x=\"" + px(x0) + "\" y=\"18\" class=\"title\">" + html_escape(o.title) + (log ? " (log scale)" : "") + "</text>\n";
  s += "<rect x=\"" + px(x0) + "\" y=\"" + px(y1) + "\" width=\"" + px(x1 - x0) + "\" height=\"" + px(y0 - y1) + "\" class=\"frame\"/>\n";
  for (double t : y.ticks()) {
    const double py = y.map(t, y0, y1);
    s += "<line x1=\"" + px(x0) + "\" x2=\"" + px(x1) + "\" y1=\"" + px(py) + "\" y2=\"" + px(py) + "\" class=\"grid\"/>";
    s += "<text x=\"" + px(x0 - 6) + "\" y=\"" + px(py + 4) + "\" class=\"ytick\">" + num(t) + "</text>\n";
  }
  for (double t : x.ticks()) {
    const double pxv = x.map(t, x0, x1);
    s += "<line x1=\"" + px(pxv) + "\" x2=\"" + px(pxv) + "\" y1=\"" + px(y1) + "\" y2=\"" + px(y0) + "\" class=\"grid\"/>";
    s += "<text x=\"" + px(pxv) + "\" y=\"" + px(y0 + 16) + "\" class=\"xtick\">" + num(t) + "</text>\n";
  }
  s += "<text x=\"" + px((x0 + x1) / 2) + "\" y=\"" + px(kHeight - 4) + "\" class=\"xlabel\">" + html_escape(o.x_label) + "</text>\n";
  s += "<text x=\"14\" y=\"" + px((y0 + y1) / 2) + "\" class=\"ylabel\" transform=\"rotate(-90 14 " + px((y0 + y1) / 2) + ")\">" +
       html_escape(o.y_label) + "</text>\n";
  for (double m : o.x_marks) {
    const double pm = x.map(m, x0, x1);
    s += "<line x1=\"" + px(pm) + "\" x2=\"" + px(pm) + "\" y1=\"" + px(y1) + "\" y2=\"" + px(y0) + "\" class=\"resume\"><title>resumed at step " +
         num(m) + "</title></line>\n";
  }
  for (const auto& [v, label] : o.y_lines) {
    if (log && v <= 0) continue;
    const double pl = y.map(v, y0, y1);
    s += "<line x1=\"" + px(x0) + "\" x2=\"" + px(x1) + "\" y1=\"" + px(pl) + "\" y2=\"" + px(pl) + "\" class=\"reference\"/>";
    s += "<text x=\"" + px(x1 - 4) + "\" y=\"" + px(pl - 4) + "\" class=\"reflabel\">" + html_escape(label) + "</text>\n";
  }
  for (const auto& m : o.markers) {
    const double pm = x.map(m.first, x0, x1);
    s += "<path d=\"M" + px(pm - 4) + " " + px(y0 - 4) + "l8 8m0 -8l-8 8\" class=\"skipped\"><title>step " + num(m.first) +
         " skipped (non-finite)</title></path>\n";
  }
  double legend_x = x0 + 8;
  for (const auto& ser : series) {
    std::string pts;
    std::size_t drawn = 0;
    for (const auto& [vx, vy] : ser.points) {
      if (!std::isfinite(vy) || (log && vy <= 0)) continue;
      pts += px(x.map(vx, x0, x1)) + "," + px(y.map(vy, y0, y1)) + " ";
      ++drawn;
    }
    s += "<polyline data-series=\"" + html_escape(ser.name) + "\" data-points=\"" + std::to_string(drawn) + "\" points=\"" + pts +
         "\" fill=\"none\" stroke=\"" + ser.colour + "\" stroke-width=\"" + (ser.thin ? "1" : "1.8") + "\"" +
         (ser.thin ? " stroke-opacity=\"0.35\"" : "") + (ser.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>\n";
    if (!ser.thin || series.size() == 1) {
      s += "<rect x=\"" + px(legend_x) + "\" y=\"" + px(y1 - 11) + "\" width=\"10\" height=\"3\" fill=\"" + ser.colour + "\"/>";
      s += "<text x=\"" + px(legend_x + 14) + "\" y=\"" + px(y1 - 6) + "\" class=\"legend\">" + html_escape(ser.name) + "</text>\n";
      legend_x += 22 + 6.5 * static_cast<double>(ser.name.size());
    }
  }
  return s + "</svg>\n";
}

}  // namespace

std::string html_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

Points downsample(const Points& points, std::size_t max_points) {
  if (points.size() <= max_points || max_points < 6) return points;
  const std::size_t buckets = max_points / 3;
  Points out;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t from = b * points.size() / buckets, to = (b + 1) * points.size() / buckets;
    if (from >= to) continue;
    std::size_t lo = from, hi = from;
    for (std::size_t i = from; i < to; ++i) {
      if (points[i].second < points[lo].second) lo = i;
      if (points[i].second > points[hi].second) hi = i;
    }
    // In x order, without repeats.
    std::vector<std::size_t> keep = {from, lo, hi};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (auto i : keep) out.push_back(points[i]);
  }
  if (out.back() != points.back()) out.push_back(points.back());
  return out;
}

Points smoothed(const Points& points, double weight) {
  Points out;
  double last = 0;
  std::size_t n = 0;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(y)) continue;
    last = last * weight + (1 - weight) * y;
    ++n;
    out.emplace_back(x, last / (1 - std::pow(weight, static_cast<double>(n))));
  }
  return out;
}

std::string line_plot(const std::vector<Series>& series, const PlotOptions& o) {
  std::string s = draw(series, o, false, o.log_toggle ? "lin" : "");
  if (o.log_toggle) s += draw(series, o, true, "log");
  return s;
}

}  // namespace ctune::report
