//! The figures. Each is drawn by one function generic over the plotters
//! backend and rendered twice: PNG (bitmap, embedded font) and SVG.
//! Colours follow the order in which configurations first appear, so a
//! configuration has the same colour in every figure.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{groups, Group};
use crate::error::{Error, Result};
use crate::metrics::{LatencySummary, Record};

fn perr<E: std::fmt::Debug>(e: E) -> Error {
    Error::Other(format!("plot: {e:?}"))
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Colour of a configuration.
struct Colors(Vec<String>);

impl Colors {
    fn of(&self, config: &str) -> RGBColor {
        let i = self.0.iter().position(|c| c == config).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    }
}

macro_rules! render {
    ($out:expr, $name:expr, $size:expr, $f:ident ( $($arg:expr),* )) => {{
        let png = $out.join(format!("{}.png", $name));
        {
            let root = BitMapBackend::new(&png, $size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            $f(&root, $($arg),*)?;
            root.present().map_err(perr)?;
        }
        let svg = $out.join(format!("{}.svg", $name));
        {
            let root = SVGBackend::new(&svg, $size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            $f(&root, $($arg),*)?;
            root.present().map_err(perr)?;
        }
        $name.to_string()
    }};
}

/// Draws every figure the records support; returns the file stems written.
pub fn draw_all(records: &[Record], out: &Path) -> Result<Vec<String>> {
    let mut configs: Vec<String> = Vec::new();
    for r in records {
        if !configs.contains(&r.config) {
            configs.push(r.config.clone());
        }
    }
    let colors = Colors(configs);
    let mut files = Vec::new();
    for g in groups(records) {
        let slug = g.slug();
        if g.records.iter().any(|r| !r.timeline.is_empty()) {
            let name = format!("throughput-{slug}");
            files.push(render!(out, name, (1200, 600), throughput(&g, &colors)));
        }
        if g.records.iter().any(|r| r.ops > 0) {
            let name = format!("latency-{slug}");
            files.push(render!(out, name, (1400, 600), latency_cdf(&g, &colors)));
        }
        if g.records
            .iter()
            .any(|r| r.compactions.iter().any(|c| c.is_l0_to_l1()))
        {
            let h = 120 + 230 * g.records.len() as u32;
            let name = format!("compactions-l0l1-{slug}");
            files.push(render!(
                out,
                name,
                (1200, h),
                compaction_segments(&g, &colors)
            ));
        }
        if g.records.iter().any(|r| !r.compactions.is_empty()) {
            let name = format!("compaction-bytes-{slug}");
            files.push(render!(
                out,
                name,
                (1200, 600),
                compaction_bytes(&g, &colors)
            ));
        }
    }
    for g in groups(records) {
        if g.records.len() > 1 && g.records.iter().any(|r| r.ops > 0) {
            let name = format!("ops-{}", g.slug());
            files.push(render!(out, name, (1200, 600), ops_bars(&g, &colors)));
        }
    }
    // Value-size sweeps: a benchmark and mode run with several value sizes.
    let mut sweeps: Vec<(String, String)> = Vec::new();
    for g in groups(records) {
        let key = (g.benchmark.clone(), g.mode.clone());
        if g.value_size.is_some() && !sweeps.contains(&key) {
            sweeps.push(key);
        }
    }
    for (bench, mode) in sweeps {
        let recs: Vec<&Record> = records
            .iter()
            .filter(|r| {
                r.benchmark == bench
                    && (if r.mode.is_empty() {
                        "closed"
                    } else {
                        r.mode.as_str()
                    }) == mode
            })
            .collect();
        let slug = if mode == "open" {
            format!("{bench}-open")
        } else {
            bench.clone()
        };
        let name = format!("value-sizes-{slug}");
        files.push(render!(
            out,
            name,
            (1200, 600),
            value_sizes(&recs, &bench, &colors)
        ));
    }
    for (bench, recs) in super::sweeps(records) {
        let name = format!("latency-vs-load-{bench}");
        files.push(render!(
            out,
            name,
            (1400, 600),
            latency_vs_load(&bench, &recs, &colors)
        ));
    }
    let mut steady_benches: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.steady.is_some()) {
        if !steady_benches.contains(&r.benchmark.as_str()) {
            steady_benches.push(&r.benchmark);
        }
    }
    for bench in steady_benches {
        let recs: Vec<&Record> = records
            .iter()
            .filter(|r| r.benchmark == bench && r.steady.is_some())
            .collect();
        let name = format!("steady-{bench}");
        files.push(render!(
            out,
            name,
            (1200, 600),
            steady_warmup(bench, &recs, &colors)
        ));
    }
    let writers: Vec<&Record> = records.iter().filter(|r| r.bytes.user > 0).collect();
    if !writers.is_empty() {
        files.push(render!(
            out,
            "write-amp",
            (1200, 600),
            write_amp(&writers, &colors)
        ));
    }
    let mut last: Vec<&Record> = Vec::new();
    for c in &colors.0 {
        if let Some(r) = records
            .iter()
            .rev()
            .find(|r| &r.config == c && !r.levels.is_empty())
        {
            last.push(r);
        }
    }
    if !last.is_empty() {
        files.push(render!(
            out,
            "level-shape",
            (1200, 600),
            level_shape(&last, &colors)
        ));
    }
    Ok(files)
}

fn title(g: &Group<'_>, what: &str) -> String {
    let r = g.records[0];
    let mode = if g.mode == "open" {
        match r.rate_ops_per_sec {
            Some(rate) => format!(", open loop at {rate:.0} ops/s"),
            None => ", open loop".into(),
        }
    } else {
        String::new()
    };
    format!(
        "{} — {what} (scale {}, {} B values{mode})",
        g.benchmark, r.scale, r.value_size
    )
}

fn legend<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    pos: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(perr)
}

fn throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    g: &Group<'_>,
    colors: &Colors,
) -> Result<()> {
    let series: Vec<(&Record, Vec<(f64, f64)>)> = g
        .records
        .iter()
        .map(|r| {
            // Whole seconds only: the last partial second is not a rate.
            let n = (r.seconds.floor() as usize).clamp(1, r.timeline.len().max(1));
            let pts = r
                .timeline
                .iter()
                .take(n)
                .enumerate()
                .map(|(i, &v)| (i as f64 + 0.5, v as f64))
                .collect();
            (*r, pts)
        })
        .collect();
    let x_max = series
        .iter()
        .map(|(_, p)| p.len() as f64)
        .fold(1.0, f64::max);
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(1.0, f64::max)
        * 1.35; // headroom for the legend
    let mut chart = ChartBuilder::on(root)
        .caption(title(g, "throughput over time"), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the benchmark started")
        .y_desc("operations per second")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .y_label_formatter(&|v| fmt_count(*v))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    for (r, pts) in series {
        let c = colors.of(&r.config);
        let label = if r.stall.writes > 0 {
            format!(
                "{}: {} ops/s, {:.1}% troughs, longest write {}, {:.1}% in writes > 1 ms",
                r.config,
                fmt_count(r.ops_per_sec),
                r.troughs.percent,
                fmt_us(r.stall.write_seconds_max * 1e6),
                r.stall.slow_write_time_percent
            )
        } else {
            format!(
                "{}: {} ops/s, {:.1}% troughs",
                r.config,
                fmt_count(r.ops_per_sec),
                r.troughs.percent
            )
        };
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(perr)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// `[quantile, µs]` points of a record, from its CDF or its percentiles.
fn cdf_of(r: &Record) -> Vec<(f64, f64)> {
    if !r.latency_cdf.is_empty() {
        return r.latency_cdf.iter().map(|p| (p[0], p[1])).collect();
    }
    let l = &r.latency_us.all;
    vec![
        (0.5, l.p50),
        (0.9, l.p90),
        (0.99, l.p99),
        (0.999, l.p999),
        (0.9999, l.p9999),
        (1.0, l.max),
    ]
}

fn latency_cdf<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    g: &Group<'_>,
    colors: &Colors,
) -> Result<()> {
    let cdfs: Vec<(&Record, Vec<(f64, f64)>)> = g
        .records
        .iter()
        .map(|r| {
            (
                *r,
                cdf_of(r)
                    .into_iter()
                    .map(|(q, us)| (q, us.max(0.01)))
                    .collect(),
            )
        })
        .collect();
    let lo = cdfs
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(f64::MAX, f64::min)
        .max(0.01)
        / 1.5;
    let hi = cdfs
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(lo * 10.0)
        * 1.5;
    let titled = root
        .titled(&title(g, "latency"), ("sans-serif", 22))
        .map_err(perr)?;
    let (left, right) = titled.split_horizontally(titled.dim_in_pixel().0 / 2);
    // Left: the whole CDF.
    {
        let mut chart = ChartBuilder::on(&left)
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..100f64)
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("latency (µs, log scale)")
            .y_desc("requests at or below (%)")
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|v| fmt_us(*v))
            .light_line_style(BLACK.mix(0.05))
            .draw()
            .map_err(perr)?;
        for (r, c) in &cdfs {
            let col = colors.of(&r.config);
            chart
                .draw_series(LineSeries::new(
                    c.iter().map(|(q, us)| (*us, q * 100.0)),
                    col.stroke_width(2),
                ))
                .map_err(perr)?
                .label(format!(
                    "{}: P50 {}",
                    r.config,
                    fmt_us(r.latency_us.all.p50)
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3))
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }
    // Right: the tail, on a "nines" scale: y = −log10(1 − q).
    {
        let nines_max = cdfs
            .iter()
            .map(|(r, _)| (r.ops.max(10) as f64).log10())
            .fold(2.0, f64::max)
            .ceil();
        let mut chart = ChartBuilder::on(&right)
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..nines_max)
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("latency (µs, log scale)")
            .y_desc("percentile")
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|v| fmt_us(*v))
            .y_labels(nines_max as usize + 1)
            .y_label_formatter(&|n| fmt_nines(*n))
            .light_line_style(BLACK.mix(0.05))
            .draw()
            .map_err(perr)?;
        for (r, c) in &cdfs {
            let col = colors.of(&r.config);
            let pts = c
                .iter()
                .map(|(q, us)| (*us, (-(1.0 - q).max(1e-12).log10()).min(nines_max)));
            chart
                .draw_series(LineSeries::new(pts, col.stroke_width(2)))
                .map_err(perr)?
                .label(format!(
                    "{}: P99 {}  P99.9 {}  max {}",
                    r.config,
                    fmt_us(r.latency_us.all.p99),
                    fmt_us(r.latency_us.all.p999),
                    fmt_us(r.latency_us.all.max)
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3))
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    Ok(())
}

/// Latency against offered load (vLSM Fig. 8): for each configuration,
/// P50 (thin), P99 (thick) and P99.9 (dots) at each offered rate; writes
/// left, reads right (mixed workloads), the latency target as a grey line.
fn latency_vs_load<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    bench: &str,
    recs: &[&Record],
    colors: &Colors,
) -> Result<()> {
    let target = recs
        .iter()
        .find_map(|r| r.sweep.as_ref().map(|p| p.target_us))
        .unwrap_or(1000.0);
    let lat = |r: &Record, write: bool| {
        let (w, rd) = super::summary::split_latency(r);
        if write {
            w.cloned()
        } else {
            rd.cloned()
        }
    };
    let classes: Vec<bool> = [true, false]
        .into_iter()
        .filter(|&w| recs.iter().any(|r| lat(r, w).is_some()))
        .collect();
    let x_max = recs
        .iter()
        .filter_map(|r| r.rate_ops_per_sec)
        .fold(1.0, f64::max)
        * 1.05;
    let vals = recs.iter().flat_map(|r| {
        [true, false]
            .into_iter()
            .filter_map(move |w| lat(r, w))
            .flat_map(|l| [l.p50, l.p99, l.p999])
    });
    let (lo, hi) = vals.fold((f64::MAX, target), |(a, b), v| (a.min(v), b.max(v)));
    let lo = (lo.min(target) / 2.0).max(0.1);
    let hi = hi * 2.0;
    let titled = root
        .titled(
            &format!("{bench} — latency against offered load (open loop)"),
            ("sans-serif", 22),
        )
        .map_err(perr)?;
    let areas = titled.split_evenly((1, classes.len().max(1)));
    for (area, &write) in areas.iter().zip(&classes) {
        let mut chart = ChartBuilder::on(area)
            .caption(if write { "writes" } else { "reads" }, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, (lo..hi).log_scale())
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("offered requests per second")
            .y_desc("latency (log scale)")
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|v| fmt_count(*v))
            .y_label_formatter(&|v| fmt_us(*v))
            .light_line_style(BLACK.mix(0.05))
            .draw()
            .map_err(perr)?;
        let red = RGBColor(200, 0, 0).mix(0.6);
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, target), (x_max, target)],
                red.stroke_width(2),
            ))
            .map_err(perr)?
            .label(format!("target P99 {}", fmt_us(target)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red.stroke_width(2)));
        let mut configs: Vec<&str> = Vec::new();
        for r in recs {
            if !configs.contains(&r.config.as_str()) {
                configs.push(&r.config);
            }
        }
        for c in configs {
            let col = colors.of(c);
            let mut pts: Vec<(f64, LatencySummary)> = recs
                .iter()
                .filter(|r| r.config == c)
                .filter_map(|r| Some((r.rate_ops_per_sec?, lat(r, write)?)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let line = |f: fn(&LatencySummary) -> f64| -> Vec<(f64, f64)> {
                pts.iter().map(|(x, l)| (*x, f(l).max(lo))).collect()
            };
            chart
                .draw_series(LineSeries::new(line(|l| l.p99), col.stroke_width(3)))
                .map_err(perr)?
                .label(format!("{c}: P99 (thick), P50 (thin), P99.9 (dots)"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3))
                });
            chart
                .draw_series(LineSeries::new(line(|l| l.p50), col.stroke_width(1)))
                .map_err(perr)?;
            chart
                .draw_series(
                    line(|l| l.p999)
                        .into_iter()
                        .map(|p| Circle::new(p, 4, col.filled())),
                )
                .map_err(perr)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    Ok(())
}

/// The compaction debt after each warm-up chunk of a steady-state run.
fn steady_warmup<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    bench: &str,
    recs: &[&Record],
    colors: &Colors,
) -> Result<()> {
    let x_max = recs
        .iter()
        .filter_map(|r| r.steady.as_ref())
        .flat_map(|s| s.samples.iter().map(|p| p.seconds))
        .fold(1.0, f64::max);
    let y_max = recs
        .iter()
        .filter_map(|r| r.steady.as_ref())
        .flat_map(|s| s.samples.iter().map(|p| p.ratio_max))
        .fold(s_factor(recs), f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{bench} — steady-state warm-up: worst level ÷ its target"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("seconds of warm-up")
        .y_desc("worst level size ÷ target")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    let f = s_factor(recs);
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, f), (x_max, f)],
            BLACK.mix(0.4).stroke_width(1),
        ))
        .map_err(perr)?
        .label(format!("factor {f}"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    for r in recs {
        let Some(st) = &r.steady else { continue };
        let col = colors.of(&r.config);
        chart
            .draw_series(LineSeries::new(
                st.samples.iter().map(|p| (p.seconds, p.ratio_max)),
                col.stroke_width(2),
            ))
            .map_err(perr)?
            .label(format!(
                "{}: {} warm-up ops, {}",
                r.config, st.warmup_ops, st.settled
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn s_factor(recs: &[&Record]) -> f64 {
    recs.iter()
        .find_map(|r| r.steady.as_ref().map(|s| s.factor))
        .unwrap_or(2.0)
}

fn compaction_segments<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    g: &Group<'_>,
    colors: &Colors,
) -> Result<()> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let x_max = g
        .records
        .iter()
        .map(|r| {
            r.compactions
                .iter()
                .map(|c| c.start_s + c.duration_s)
                .fold(r.seconds, f64::max)
        })
        .fold(1.0, f64::max);
    let y_max = g
        .records
        .iter()
        .flat_map(|r| r.compactions.iter().filter(|c| c.is_l0_to_l1()))
        .map(|c| mib(c.input_bytes))
        .fold(1.0, f64::max)
        * 1.2;
    let titled = root
        .titled(
            &title(g, "L0→L1 compactions: duration × input size"),
            ("sans-serif", 22),
        )
        .map_err(perr)?;
    let rows = titled.split_evenly((g.records.len(), 1));
    for (area, r) in rows.iter().zip(&g.records) {
        let comps: Vec<_> = r.compactions.iter().filter(|c| c.is_l0_to_l1()).collect();
        let total: f64 = comps.iter().fold(0.0, |a, c| a + c.duration_s);
        let caption = format!(
            "{}: {} L0→L1 compactions, {:.1} s busy, {:.1} MiB in",
            r.config,
            comps.len(),
            total,
            comps.iter().fold(0.0, |a, c| a + mib(c.input_bytes))
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 17))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the benchmark started")
            .y_desc("input MiB")
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 13))
            .light_line_style(BLACK.mix(0.05))
            .draw()
            .map_err(perr)?;
        let col = colors.of(&r.config);
        chart
            .draw_series(comps.iter().map(|c| {
                let y = mib(c.input_bytes);
                PathElement::new(
                    vec![(c.start_s, y), (c.start_s + c.duration_s, y)],
                    col.stroke_width(4),
                )
            }))
            .map_err(perr)?;
        chart
            .draw_series(
                comps
                    .iter()
                    .map(|c| Circle::new((c.start_s, mib(c.input_bytes)), 3, col.filled())),
            )
            .map_err(perr)?;
    }
    Ok(())
}

fn compaction_bytes<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    g: &Group<'_>,
    colors: &Colors,
) -> Result<()> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let n_max = g
        .records
        .iter()
        .map(|r| r.compactions.len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let y_max = g
        .records
        .iter()
        .flat_map(|r| r.compactions.iter())
        .map(|c| mib(c.input_bytes))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(title(g, "bytes per compaction"), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n_max + 1.0, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("compaction (in start order)")
        .y_desc("input MiB")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    for r in &g.records {
        let col = colors.of(&r.config);
        let n = r.compactions.len();
        let avg = if n == 0 {
            0.0
        } else {
            r.compactions
                .iter()
                .map(|c| mib(c.input_bytes))
                .sum::<f64>()
                / n as f64
        };
        chart
            .draw_series(r.compactions.iter().enumerate().map(|(i, c)| {
                let filled = if c.is_l0_to_l1() {
                    col.filled()
                } else {
                    col.stroke_width(1)
                };
                Circle::new((i as f64 + 1.0, mib(c.input_bytes)), 4, filled)
            }))
            .map_err(perr)?
            .label(format!(
                "{}: {n} compactions, {avg:.1} MiB average (filled = L0→L1)",
                r.config
            ))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, col.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Draws category names under integer x positions of a chart.
fn category_labels<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    names: &[String],
    y0: f64,
) -> Result<()> {
    let style = TextStyle::from(("sans-serif", 14).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let (ox, oy) = chart.plotting_area().get_base_pixel();
    let (rx, ry) = root.get_base_pixel();
    for (i, n) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, y0));
        let _ = (ox, oy);
        root.draw_text(n, &style, (px - rx, py - ry + 8))
            .map_err(perr)?;
    }
    Ok(())
}

/// Operations per second per record of a group, as bars.
fn ops_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    g: &Group<'_>,
    colors: &Colors,
) -> Result<()> {
    let recs = &g.records;
    let names: Vec<String> = recs.iter().map(|r| r.config.clone()).collect();
    let y_max = recs.iter().map(|r| r.ops_per_sec).fold(1.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(root)
        .caption(title(g, "operations per second"), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.6f64..recs.len() as f64 - 0.4, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc("ops/s")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    let value_style = TextStyle::from(("sans-serif", 14).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(recs.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [(i as f64 - 0.3, 0.0), (i as f64 + 0.3, r.ops_per_sec)],
                colors.of(&r.config).filled(),
            )
        }))
        .map_err(perr)?;
    chart
        .draw_series(recs.iter().enumerate().map(|(i, r)| {
            Text::new(
                format!("{:.0}", r.ops_per_sec),
                (i as f64, r.ops_per_sec),
                value_style.clone(),
            )
        }))
        .map_err(perr)?;
    category_labels(root, &chart, &names, 0.0)
}

/// MB/s against the value size (log scale), one line per configuration.
fn value_sizes<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    recs: &[&Record],
    bench: &str,
    colors: &Colors,
) -> Result<()> {
    let mut configs: Vec<&str> = Vec::new();
    for r in recs {
        if !configs.contains(&r.config.as_str()) {
            configs.push(&r.config);
        }
    }
    let lx = |v: usize| (v.max(1) as f64).log2();
    let x_min = recs
        .iter()
        .map(|r| lx(r.value_size))
        .fold(f64::MAX, f64::min);
    let x_max = recs.iter().map(|r| lx(r.value_size)).fold(0.0, f64::max);
    let y_max = recs.iter().map(|r| r.mb_per_sec).fold(1.0, f64::max) * 1.3;
    let scale = recs.first().map_or(String::new(), |r| r.scale.clone());
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{bench} — MB/s by value size (scale {scale})"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_min - 0.3..x_max + 0.3, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("value size (bytes, log scale)")
        .y_desc("MB/s")
        .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    for c in configs {
        let mut pts: Vec<(f64, f64)> = recs
            .iter()
            .filter(|r| r.config == c)
            .map(|r| (lx(r.value_size), r.mb_per_sec))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Several runs at one size: the line goes through their mean,
        // each run stays a dot (no vertical zigzag between runs).
        let mut line: Vec<(f64, f64, u32)> = Vec::new();
        for &(x, y) in &pts {
            match line.last_mut() {
                Some(l) if l.0 == x => {
                    l.1 += y;
                    l.2 += 1;
                }
                _ => line.push((x, y, 1)),
            }
        }
        let line: Vec<(f64, f64)> = line
            .into_iter()
            .map(|(x, y, n)| (x, y / f64::from(n)))
            .collect();
        let col = colors.of(c);
        chart
            .draw_series(LineSeries::new(line, col.stroke_width(2)))
            .map_err(perr)?
            .label(c.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))
            .map_err(perr)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

fn write_amp<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    recs: &[&Record],
    colors: &Colors,
) -> Result<()> {
    let names: Vec<String> = recs
        .iter()
        .map(|r| format!("{} · {}", r.config, r.benchmark))
        .collect();
    let y_max = recs
        .iter()
        .map(|r| r.write_amp.total.max(r.write_amp.ssd).max(r.io_amp))
        .fold(1.0, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Write amplification per configuration (bytes written ÷ user bytes)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.6f64..recs.len() as f64 - 0.4, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc("amplification")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    let value_style = TextStyle::from(("sans-serif", 14).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    let bars = [
        ("SSD", 1.0),
        ("SSD + PM", 0.55),
        ("I/O (SSD read + write)", 0.25),
    ];
    for (k, &(label, alpha)) in bars.iter().enumerate() {
        let off = -0.3 + 0.2 * k as f64;
        chart
            .draw_series(recs.iter().enumerate().map(|(i, r)| {
                let v = [r.write_amp.ssd, r.write_amp.total, r.io_amp][k];
                let c = colors.of(&r.config).mix(alpha);
                Rectangle::new(
                    [(i as f64 + off - 0.09, 0.0), (i as f64 + off + 0.09, v)],
                    c.filled(),
                )
            }))
            .map_err(perr)?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], BLACK.mix(alpha).filled())
            });
        chart
            .draw_series(recs.iter().enumerate().map(|(i, r)| {
                let v = [r.write_amp.ssd, r.write_amp.total, r.io_amp][k];
                Text::new(format!("{v:.2}"), (i as f64 + off, v), value_style.clone())
            }))
            .map_err(perr)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    category_labels(root, &chart, &names, 0.0)
}

fn level_shape<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    recs: &[&Record],
    colors: &Colors,
) -> Result<()> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let max_level = recs
        .iter()
        .flat_map(|r| r.levels.iter().map(|l| l.level))
        .max()
        .unwrap_or(0);
    let y_max = recs
        .iter()
        .flat_map(|r| {
            (0..=max_level).map(move |lv| {
                r.levels
                    .iter()
                    .filter(|l| l.level == lv)
                    .map(|l| mib(l.bytes))
                    .sum::<f64>()
            })
        })
        .fold(1.0, f64::max)
        * 1.2;
    let names: Vec<String> = (0..=max_level).map(|l| format!("L{l}")).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Level shape at the end of each run (MiB per level; light = PM tier)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6f64..max_level as f64 + 0.6, 0f64..y_max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc("MiB")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.05))
        .draw()
        .map_err(perr)?;
    let n = recs.len() as f64;
    let w = 0.8 / n;
    let text = TextStyle::from(("sans-serif", 12).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (k, r) in recs.iter().enumerate() {
        let col = colors.of(&r.config);
        let x0 = -0.4 + w * k as f64;
        let mut rects = Vec::new();
        let mut labels = Vec::new();
        for lv in 0..=max_level {
            let mut y = 0.0;
            let mut files = 0;
            for tier in ["ssd", "pm"] {
                for l in r.levels.iter().filter(|l| l.level == lv && l.tier == tier) {
                    let h = mib(l.bytes);
                    let style = if tier == "pm" {
                        col.mix(0.45).filled()
                    } else {
                        col.filled()
                    };
                    rects.push(Rectangle::new(
                        [
                            (lv as f64 + x0 + 0.02, y),
                            (lv as f64 + x0 + w - 0.02, y + h),
                        ],
                        style,
                    ));
                    y += h;
                    files += l.files;
                }
            }
            if files > 0 {
                labels.push(Text::new(
                    format!("{files} f"),
                    (lv as f64 + x0 + w / 2.0, y),
                    text.clone(),
                ));
            }
        }
        chart
            .draw_series(rects)
            .map_err(perr)?
            .label(format!("{} (after {})", r.config, r.benchmark))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
        chart.draw_series(labels).map_err(perr)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    category_labels(root, &chart, &names, 0.0)
}

/// `38,883` style counts (k / M for large values).
pub fn fmt_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds as µs / ms / s.
pub fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else if us >= 10.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

/// `n` nines as a percentile label: 1 → 90%, 2 → 99%, 3 → 99.9%.
fn fmt_nines(n: f64) -> String {
    if n.fract().abs() > 1e-6 {
        return String::new();
    }
    let p = 100.0 * (1.0 - 10f64.powf(-n));
    match n as i64 {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        k => format!("{:.*}%", (k - 2) as usize, p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(fmt_nines(3.0), "99.9%");
        assert_eq!(fmt_nines(5.0), "99.999%");
        assert_eq!(fmt_nines(2.5), "");
        assert_eq!(fmt_us(3093.0), "3.1 ms");
        assert_eq!(fmt_count(38883.0), "39k");
    }
}
