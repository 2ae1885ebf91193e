#include "simulator/sweep_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/text_format.h"

namespace shardplan {
namespace {

double gib(double bytes) {
  return bytes / 1073741824.0;
}

}  // namespace

std::string sweep_report_html(const SweepResult& r, const std::string& title, int top) {
  constexpr double kW = 1000, kH = 480, kLeft = 80, kBottom = 50, kTop = 20, kRight = 20;
  double max_t = 0, max_m = static_cast<double>(r.memory_cap);
  for (const SweepPoint& p : r.points) {
    if (p.state != PointState::evaluated) continue;
    max_t = std::max(max_t, p.summary.step_seconds);
    max_m = std::max(max_m, static_cast<double>(p.summary.peak_reserved_bytes));
  }
  max_t = std::max(max_t * 1.05, 1e-9);
  max_m *= 1.05;
  auto x_of = [&](double t) { return kLeft + (kW - kLeft - kRight) * t / max_t; };
  auto y_of = [&](double m) { return kTop + (kH - kTop - kBottom) * (1 - m / max_m); };
  std::string svg = fmt::format("<svg width='{}' height='{}' role='img'>\n", kW, kH);
  for (int k = 0; k <= 5; ++k) {
    const double t = max_t * k / 5, m = max_m * k / 5;
    svg += fmt::format(
        "<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' class='grid'/><text x='{0:.1f}' "
        "y='{3}' class='tick' text-anchor='middle'>{4:.3g} s</text>\n",
        x_of(t), kTop, kH - kBottom, kH - kBottom + 16, t);
    svg += fmt::format(
        "<line x1='{0}' x2='{1}' y1='{2:.1f}' y2='{2:.1f}' class='grid'/><text x='{3}' "
        "y='{4:.1f}' class='tick' text-anchor='end'>{5:.1f} GiB</text>\n",
        kLeft, kW - kRight, y_of(m), kLeft - 6, y_of(m) + 4, gib(m));
  }
  svg += fmt::format(
      "<text x='{}' y='{}' class='tick' text-anchor='middle'>step time</text>\n"
      "<text x='14' y='{}' class='tick' transform='rotate(-90 14 {})' "
      "text-anchor='middle'>peak reserved per GPU</text>\n",
      (kW + kLeft) / 2, kH - 10, kH / 2, kH / 2);
  const double cap_y = y_of(static_cast<double>(r.memory_cap));
  svg += fmt::format(
      "<line x1='{0}' x2='{1}' y1='{2:.1f}' y2='{2:.1f}' stroke='#c00' stroke-dasharray='6 4'/>"
      "<text x='{1}' y='{3:.1f}' class='tick' fill='#c00' text-anchor='end'>memory cap "
      "{4:.1f} GiB</text>\n",
      kLeft, kW - kRight, cap_y, cap_y - 4, gib(static_cast<double>(r.memory_cap)));
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    const SweepPoint& p = r.points[i];
    if (p.state != PointState::evaluated) continue;
    if (p.pareto) front.push_back(i);
    svg += fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}' fill-opacity='0.55'><title>{}: {:.4g} s, "
        "{:.1f} GiB</title></circle>\n",
        x_of(p.summary.step_seconds), y_of(static_cast<double>(p.summary.peak_reserved_bytes)),
        p.fits ? "#0072B2" : "#999999", html_escape(describe_config(p.config)),
        p.summary.step_seconds, gib(static_cast<double>(p.summary.peak_reserved_bytes)));
  }
  std::sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) {
    return r.points[a].summary.step_seconds < r.points[b].summary.step_seconds;
  });
  std::string line;
  for (std::size_t i : front) {
    const SweepPoint& p = r.points[i];
    line += fmt::format("{:.1f},{:.1f} ", x_of(p.summary.step_seconds),
                        y_of(static_cast<double>(p.summary.peak_reserved_bytes)));
    svg += fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='5' fill='none' stroke='#D55E00' stroke-width='2'>"
        "<title>Pareto: {}</title></circle>\n",
        x_of(p.summary.step_seconds), y_of(static_cast<double>(p.summary.peak_reserved_bytes)),
        html_escape(describe_config(p.config)));
  }
  svg += fmt::format("<polyline points='{}' fill='none' stroke='#D55E00' stroke-width='1.5'/>\n",
                     line);
  if (!r.ranking.empty()) {
    const SweepPoint& best = r.points[r.ranking.front()];
    svg += fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='8' fill='none' stroke='#009E73' stroke-width='3'>"
        "<title>best: {}</title></circle>\n",
        x_of(best.summary.step_seconds),
        y_of(static_cast<double>(best.summary.peak_reserved_bytes)),
        html_escape(describe_config(best.config)));
  }
  svg += "</svg>\n";

  std::string table =
      "<table>\n<tr><th>rank</th><th>configuration</th><th>step</th><th>tokens/s/GPU</th>"
      "<th>MFU</th><th>peak reserved</th><th>headroom</th></tr>\n";
  for (std::size_t k = 0; k < r.ranking.size() && k < static_cast<std::size_t>(top); ++k) {
    const SweepPoint& p = r.points[r.ranking[k]];
    table += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.4g} s</td><td>{:.0f}</td><td>{:.1f} %</td>"
        "<td>{:.2f} GiB</td><td>{:.2f} GiB</td></tr>\n",
        k + 1, html_escape(describe_config(p.config)), p.summary.step_seconds,
        p.summary.tokens_per_second_per_gpu, 100 * p.summary.mfu,
        gib(static_cast<double>(p.summary.peak_reserved_bytes)),
        gib(static_cast<double>(r.memory_cap - p.summary.peak_reserved_bytes)));
  }
  table += "</table>\n";
  return fmt::format(
      "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n<title>{0}</title>\n"
      "<style>\nbody{{font-family:sans-serif;margin:24px;color:#222;max-width:1060px}}\n"
      "table{{border-collapse:collapse}} th,td{{padding:3px 10px;border-bottom:1px solid #ddd;"
      "text-align:left}}\n.grid{{stroke:#eee}} .tick{{font-size:11px;fill:#555}}\n</style>\n"
      "</head>\n<body>\n<h1>{0}</h1>\n<p>{1} configurations: {2} evaluated, {3} pruned (their "
      "persistent state alone exceeds the cap), {4} invalid; {5} fit under {6:.1f} GiB.</p>\n"
      "<h2>Fastest that fit</h2>\n{7}<h2>Peak memory against step time</h2>\n<p>Every evaluated "
      "configuration (blue: fits, grey: does not); the Pareto front in orange, the best in "
      "green, the cap dashed. Hover a point for its configuration.</p>\n{8}</body>\n</html>\n",
      html_escape(title), r.points.size(), r.evaluated, r.pruned, r.invalid, r.ranking.size(),
      gib(static_cast<double>(r.memory_cap)), table, svg);
}

}  // namespace shardplan
