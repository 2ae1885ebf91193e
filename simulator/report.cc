#include "simulator/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>

#include "models/text_format.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

constexpr double kWidth = 1100;  // drawing width of every chart, px
constexpr double kLeft = 70;     // room for the axis labels
constexpr double kPlot = kWidth - kLeft - 20;

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
}

// Colour-blind-safe palette (Okabe & Ito 2008) and its extension, one per role or kind.
constexpr std::array<const char*, 11> kPalette = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                                  "#56B4E9", "#D55E00", "#F0E442", "#999999",
                                                  "#332288", "#88CCEE", "#AA4499"};

const char* role_colour(BufferRole role) {
  return kPalette[static_cast<std::size_t>(role) % kPalette.size()];
}

std::string time_axis(double step, double y, double height) {
  std::string out;
  for (int k = 0; k <= 10; ++k) {
    const double x = kLeft + kPlot * k / 10.0;
    out += fmt::format(
        "<line x1='{0:.1f}' y1='{1:.1f}' x2='{0:.1f}' y2='{2:.1f}' class='grid'/>"
        "<text x='{0:.1f}' y='{3:.1f}' class='tick' text-anchor='middle'>{4}</text>\n",
        x, y, y + height, y + height + 14, format_seconds(step * k / 10.0));
  }
  return out;
}

double x_of(double t, double step) {
  return kLeft + (step > 0 ? kPlot * t / step : 0);
}

// Memory over time, stacked by role: non-tensor at the bottom, then the persistent roles,
// then the transient ones, as step areas.
std::string memory_chart(const Plan& plan, const Timeline& t,
                         const std::vector<BufferLifetime>& spans) {
  const double step = std::max(t.summary.step_seconds, 1e-30);
  std::vector<double> times = {0, step};
  for (const PlanBuffer& b : plan.buffers) {
    const BufferLifetime& s = spans[static_cast<std::size_t>(b.id)];
    if (!b.persistent && s.used) {
      times.push_back(s.alloc);
      times.push_back(s.free);
    }
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  // Bytes per role live over [times[k], times[k+1]).
  const std::size_t roles = buffer_role_names().size();
  std::vector<std::vector<double>> live(roles, std::vector<double>(times.size(), 0));
  auto index = [&](double x) {
    return static_cast<std::size_t>(std::lower_bound(times.begin(), times.end(), x) -
                                    times.begin());
  };
  for (const PlanBuffer& b : plan.buffers) {
    const BufferLifetime& s = spans[static_cast<std::size_t>(b.id)];
    if (!s.used || b.bytes <= 0) continue;
    const std::size_t lo = index(s.alloc), hi = index(s.free);
    for (std::size_t k = lo; k < std::max(hi, lo + 1) && k < times.size(); ++k)
      live[static_cast<std::size_t>(b.role)][k] += static_cast<double>(b.bytes);
  }
  const double non_tensor = static_cast<double>(plan.non_tensor_bytes);
  double top = std::max(static_cast<double>(t.summary.peak_reserved_bytes),
                        static_cast<double>(plan.capacity_bytes));
  const double height = 260, y0 = 20;
  auto y_of = [&](double bytes) { return y0 + height - height * bytes / top; };
  std::string svg = fmt::format("<svg width='{}' height='{}' role='img'>\n", kWidth, height + 60);
  svg += time_axis(step, y0, height);
  for (int k = 0; k <= 4; ++k) {
    const double bytes = top * k / 4.0;
    svg += fmt::format("<text x='{}' y='{:.1f}' class='tick' text-anchor='end'>{}</text>\n",
                       kLeft - 6, y_of(bytes) + 4, gib(bytes));
  }
  std::vector<double> below(times.size(), non_tensor);
  auto area = [&](const std::vector<double>& bottom, const std::vector<double>& upper,
                  const char* colour, const std::string& label) {
    std::string points;
    for (std::size_t k = 0; k < times.size(); ++k) {
      const double x0 = x_of(times[k], step);
      const double x1 = x_of(k + 1 < times.size() ? times[k + 1] : step, step);
      points += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x0, y_of(upper[k]), x1, y_of(upper[k]));
    }
    for (std::size_t k = times.size(); k-- > 0;) {
      const double x0 = x_of(times[k], step);
      const double x1 = x_of(k + 1 < times.size() ? times[k + 1] : step, step);
      points +=
          fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x1, y_of(bottom[k]), x0, y_of(bottom[k]));
    }
    return fmt::format(
        "<polygon points='{}' fill='{}' fill-opacity='0.85'><title>{}</title></polygon>\n", points,
        colour, html_escape(label));
  };
  svg += area(std::vector<double>(times.size(), 0), below, "#dddddd", "non-tensor");
  std::string legend = "<span class='key' style='background:#dddddd'></span>non-tensor ";
  // Persistent roles first (they sit under the transient ones), in role order.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t r = 0; r < roles; ++r) {
      const auto role = static_cast<BufferRole>(r);
      const bool persistent_role =
          std::any_of(plan.buffers.begin(), plan.buffers.end(),
                      [&](const PlanBuffer& b) { return b.role == role && b.persistent; });
      if ((pass == 0) != persistent_role) continue;
      if (std::all_of(live[r].begin(), live[r].end(), [](double v) { return v == 0; })) continue;
      std::vector<double> upper = below;
      for (std::size_t k = 0; k < times.size(); ++k) upper[k] += live[r][k];
      svg += area(below, upper, role_colour(role), std::string(buffer_role_name(role)));
      legend += fmt::format("<span class='key' style='background:{}'></span>{} ", role_colour(role),
                            buffer_role_name(role));
      below = std::move(upper);
    }
  }
  // Reserved (the allocator's view) as a line, the capacity as a dashed line.
  std::string reserved;
  for (const MemorySample& m : t.memory) {
    reserved +=
        fmt::format("{:.1f},{:.1f} ", x_of(m.time, step), y_of(static_cast<double>(m.reserved)));
  }
  svg += fmt::format(
      "<polyline points='{}' fill='none' stroke='#000' "
      "stroke-width='1.5'><title>reserved</title></polyline>\n",
      reserved);
  svg += fmt::format(
      "<line x1='{0}' x2='{1}' y1='{2:.1f}' y2='{2:.1f}' stroke='#c00' stroke-dasharray='6 4'/>"
      "<text x='{1}' y='{3:.1f}' class='tick' text-anchor='end' fill='#c00'>capacity {4}</text>\n",
      kLeft, kLeft + kPlot, y_of(static_cast<double>(plan.capacity_bytes)),
      y_of(static_cast<double>(plan.capacity_bytes)) - 4,
      gib(static_cast<double>(plan.capacity_bytes)));
  svg += "</svg>\n";
  return "<h2>Memory over time</h2>\n<p class='legend'>" + legend +
         "<span class='key' style='background:#000'></span>reserved</p>\n" + svg;
}

// The pool: each transient buffer as a rectangle over its offset range and its lifetime.
std::string pool_chart(const Plan& plan, const Timeline& t,
                       const std::vector<BufferLifetime>& spans) {
  const double step = std::max(t.summary.step_seconds, 1e-30);
  const double pool = std::max<double>(static_cast<double>(plan.pool.size_bytes), 1);
  const double height = 300, y0 = 20;
  std::string svg = fmt::format("<svg width='{}' height='{}' role='img'>\n", kWidth, height + 60);
  svg += time_axis(step, y0, height);
  for (int k = 0; k <= 4; ++k) {
    svg += fmt::format("<text x='{}' y='{:.1f}' class='tick' text-anchor='end'>{}</text>\n",
                       kLeft - 6, y0 + height - height * k / 4.0 + 4, gib(pool * k / 4.0));
  }
  int64_t drawn = 0;
  for (const PlanBuffer& b : plan.buffers) {
    const BufferLifetime& s = spans[static_cast<std::size_t>(b.id)];
    if (b.persistent || !s.used || b.offset < 0 || b.bytes <= 0) continue;
    ++drawn;
    const double x = x_of(s.alloc, step);
    const double w = std::max(x_of(s.free, step) - x, 0.5);
    const double top = y0 + height - height * static_cast<double>(b.offset + b.bytes) / pool;
    const double h = std::max(height * static_cast<double>(b.bytes) / pool, 0.5);
    svg += fmt::format(
        "<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}' stroke='#fff' "
        "stroke-width='0.3'><title>{}: {} at offset {}</title></rect>\n",
        x, top, w, h, role_colour(b.role), html_escape(b.name), gib(static_cast<double>(b.bytes)),
        b.offset);
  }
  svg += "</svg>\n";
  return fmt::format(
             "<h2>Pool</h2>\n<p>{} transient buffers in a pool of {} ({}; lower bound {}). "
             "Height is the offset in the pool, width the lifetime; colours as above.</p>\n",
             drawn, gib(pool), html_escape(plan.pool.algorithm),
             gib(static_cast<double>(plan.pool.lower_bound_bytes))) +
         svg;
}

std::string gantt_chart(const Timeline& t) {
  const double step = std::max(t.summary.step_seconds, 1e-30);
  std::vector<std::string> streams;
  for (const TimelineOp& o : t.ops) {
    if (std::find(streams.begin(), streams.end(), o.stream) == streams.end())
      streams.push_back(o.stream);
  }
  std::map<std::string, const char*> colour;
  for (const TimelineOp& o : t.ops) {
    if (!colour.contains(o.kind)) colour[o.kind] = kPalette[colour.size() % kPalette.size()];
  }
  const double row = 34, y0 = 20;
  const double height = row * static_cast<double>(streams.size());
  std::string svg = fmt::format("<svg width='{}' height='{}' role='img'>\n", kWidth, height + 60);
  svg += time_axis(step, y0, height);
  for (std::size_t k = 0; k < streams.size(); ++k) {
    svg +=
        fmt::format("<text x='{}' y='{:.1f}' class='tick' text-anchor='end'>{}</text>\n", kLeft - 6,
                    y0 + row * static_cast<double>(k) + row / 2 + 4, html_escape(streams[k]));
  }
  for (const TimelineOp& o : t.ops) {
    const auto k =
        static_cast<double>(std::find(streams.begin(), streams.end(), o.stream) - streams.begin());
    const double x = x_of(o.start, step);
    svg += fmt::format(
        "<rect x='{:.2f}' y='{:.1f}' width='{:.2f}' height='{:.1f}' fill='{}'><title>{} "
        "({}): {} – {}</title></rect>\n",
        x, y0 + row * k + 4, std::max(x_of(o.end, step) - x, 0.3), row - 8, colour[o.kind],
        html_escape(o.name), html_escape(o.kind), format_seconds(o.start), format_seconds(o.end));
  }
  svg += "</svg>\n";
  std::string legend;
  for (const auto& [kind, c] : colour)
    legend +=
        fmt::format("<span class='key' style='background:{}'></span>{} ", c, html_escape(kind));
  return "<h2>Streams</h2>\n<p class='legend'>" + legend + "</p>\n" + svg;
}

std::string summary_table(const Plan& plan, const Timeline& t) {
  const TimelineSummary& s = t.summary;
  const PathBreakdown& p = s.critical_path;
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"step time", format_seconds(s.step_seconds)},
      {"tokens/s per GPU", fmt::format("{:.0f}", s.tokens_per_second_per_gpu)},
      {"TFLOP/s per GPU", fmt::format("{:.1f}", s.tflops_per_gpu)},
      {"MFU", fmt::format("{:.1f} %", 100 * s.mfu)},
      {"compute (busy)", format_seconds(s.compute_seconds)},
      {"exposed all-gather", format_seconds(s.exposed_all_gather_seconds)},
      {"exposed reduce-scatter", format_seconds(s.exposed_reduce_scatter_seconds)},
      {"exposed outer", format_seconds(s.exposed_outer_seconds)},
      {"exposed tp/cp/ep", format_seconds(s.exposed_model_parallel_seconds)},
      {"waiting for the host", format_seconds(s.host_wait_seconds)},
      {"peak allocated (tensors)",
       gib(static_cast<double>(s.peak_allocated_bytes - plan.non_tensor_bytes))},
      {"peak reserved (allocator)",
       gib(static_cast<double>(s.peak_reserved_bytes - plan.non_tensor_bytes))},
      {"non-tensor (CUDA context, workspaces, NCCL)",
       gib(static_cast<double>(plan.non_tensor_bytes))},
      {"device used (nvidia-smi)",
       fmt::format("{} of {} — {}", gib(static_cast<double>(s.peak_reserved_bytes)),
                   gib(static_cast<double>(s.capacity_bytes)), s.fits ? "fits" : "does not fit")},
      {"critical path",
       fmt::format(
           "compute {}, all-gather {}, reduce-scatter {}, outer {}, tp/cp/ep {}, optimizer {}, "
           "waiting for the host {}",
           format_seconds(p.compute), format_seconds(p.all_gather),
           format_seconds(p.reduce_scatter), format_seconds(p.outer),
           format_seconds(p.model_parallel), format_seconds(p.optimizer), format_seconds(p.host))},
  };
  std::string html = "<table>\n";
  for (const auto& [k, v] : rows)
    html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
  html += "</table>\n";
  const FsdpConfig& c = plan.config;
  // The whole mesh, as the plan's process groups split the GPUs (experts' where they
  // have their own).
  const std::string experts =
      expert_mesh(c) ? fmt::format(", experts ep {} × etp {}", c.ep, expert_tp(c)) : "";
  html += fmt::format(
      "<p>{}, dp_outer {} × dp_shard {} × cp {} × tp {}{}, prefetch {}/{}, recompute {}, "
      "micro_batch {} × seq_len {} × grad_accum {}, {} allocator.</p>\n",
      sharding_strategy_name(c.sharding_strategy), c.dp_outer, c.dp_shard, c.cp, c.tp, experts,
      c.forward_prefetch, c.backward_prefetch, recompute_label(c), c.micro_batch, c.seq_len,
      c.grad_accum, allocator_name(c.allocator));
  return html;
}

}  // namespace

std::string html_report(const Plan& plan, const Timeline& t) {
  const std::vector<BufferLifetime> spans = buffer_lifetimes(plan, t);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
      "<title>shardplan: {} on {} GPUs of {}</title>\n<style>\n"
      "body{{font-family:sans-serif;margin:24px;color:#222;max-width:1160px}}\n"
      "table{{border-collapse:collapse}} th,td{{padding:3px 10px;border-bottom:1px solid #ddd;"
      "text-align:left}}\n"
      ".grid{{stroke:#eee}} .tick{{font-size:11px;fill:#555}}\n"
      ".key{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;"
      "vertical-align:middle}}\n.legend{{font-size:13px}}\n</style>\n</head>\n<body>\n"
      "<h1>{} step: {} on {} GPUs of {}</h1>\n",
      html_escape(plan.model), plan.num_gpus, html_escape(plan.cluster), html_escape(t.source),
      html_escape(plan.model), plan.num_gpus, html_escape(plan.cluster));
  html += summary_table(plan, t);
  html += memory_chart(plan, t, spans);
  html += pool_chart(plan, t, spans);
  html += gantt_chart(t);
  html +=
      "<p class='tick'>Hover a shape for its name. Written by shardplan.</p>\n</body>\n</html>\n";
  return html;
}

}  // namespace shardplan
