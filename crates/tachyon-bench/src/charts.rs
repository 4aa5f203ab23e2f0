//! Charts of a run, each written as SVG and as PNG (plotters).
//!
//! The PNGs need a font to draw their text with; so that they come out the
//! same on a fresh machine without any system font, the benchmark embeds a
//! subset of DejaVu Sans (`assets/DejaVuSans-subset.ttf`, Latin-1 and a few
//! symbols; licence in `assets/DejaVu-LICENSE.txt`). The SVGs name the
//! font family and leave the drawing of text to the viewer.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor;
use std::path::Path;
use std::sync::Once;

/// The embedded font (a subset of DejaVu Sans).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
/// The family name charts ask for.
const FAMILY: &str = "sans-serif";

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend.
    pub name: String,
    /// `(x, y)` points, x increasing.
    pub points: Vec<(f64, f64)>,
}

/// A chart, described by its data.
#[derive(Debug, Clone)]
pub enum Chart {
    /// Horizontal bars, one row per category and one bar per series in
    /// it, on a logarithmic value axis.
    Bars {
        /// File name without extension.
        file: &'static str,
        /// Title.
        title: String,
        /// The value axis's label.
        value_label: String,
        /// Row labels, top to bottom.
        categories: Vec<String>,
        /// `(legend, one value per category)`; a value of 0 or less (or not
        /// finite) draws no bar.
        series: Vec<(String, Vec<f64>)>,
    },
    /// Lines on logarithmic axes.
    Lines {
        /// File name without extension.
        file: &'static str,
        /// Title.
        title: String,
        /// The x axis's label.
        x_label: String,
        /// The y axis's label.
        y_label: String,
        /// The lines.
        series: Vec<Series>,
    },
}

impl Chart {
    /// The file name without extension.
    pub fn file(&self) -> &'static str {
        match self {
            Chart::Bars { file, .. } | Chart::Lines { file, .. } => file,
        }
    }

    fn size(&self) -> (u32, u32) {
        match self {
            Chart::Bars { categories, series, .. } => {
                let rows = categories.len() as u32;
                let per_row = (series.len() as u32 * 9 + 8).max(20);
                (1100, 110 + rows * per_row)
            }
            Chart::Lines { .. } => (1000, 600),
        }
    }
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is embedded at compile time and known to parse; if it
        // did not, text would be missing from the PNGs, nothing worse.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// Writes `chart` into `dir` as `<file>.svg` and `<file>.png`; returns the
/// file names.
pub fn write(chart: &Chart, dir: &Path) -> Result<[String; 2], String> {
    register_font();
    let (w, h) = chart.size();
    let svg = dir.join(format!("{}.svg", chart.file()));
    let png = dir.join(format!("{}.png", chart.file()));
    {
        let root = SVGBackend::new(&svg, (w, h)).into_drawing_area();
        draw(&root, chart).map_err(|e| format!("{}: {e}", svg.display()))?;
        root.present().map_err(|e| format!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, (w, h)).into_drawing_area();
        draw(&root, chart).map_err(|e| format!("{}: {e}", png.display()))?;
        root.present().map_err(|e| format!("{}: {e}", png.display()))?;
    }
    Ok([format!("{}.svg", chart.file()), format!("{}.png", chart.file())])
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    COLORS[i % COLORS.len()]
}

/// `0.1`, `1`, `10`, `1k`, `10k`, `1M`, `1G` (with `unit` appended: `1 kB`
/// for `" B"`), for the ticks of a logarithmic axis.
fn compact(v: f64, unit: &str) -> String {
    let (x, prefix) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    let x = if x >= 1.0 { format!("{x:.0}") } else { format!("{x}") };
    match unit.strip_prefix(' ') {
        Some(u) => format!("{x} {prefix}{u}"),
        None => format!("{x}{prefix}{unit}"),
    }
}

/// A logarithmic range around the positive values.
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.1, 10.0);
    }
    (10f64.powf(lo.log10().floor()), 10f64.powf((hi * 1.5).log10().ceil()))
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    match chart {
        Chart::Bars { title, value_label, categories, series, .. } => {
            bars(root, title, value_label, categories, series)
        }
        Chart::Lines { title, x_label, y_label, series, .. } => lines(root, title, x_label, y_label, series),
    }
}

fn bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    value_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> DrawResult<DB> {
    let (lo, hi) = log_range(series.iter().flat_map(|(_, v)| v.iter().copied()));
    let rows = categories.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(300)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(value_label)
        .x_label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .x_label_formatter(&|v| compact(*v, ""))
        .draw()?;
    let n = series.len().max(1) as f64;
    let band = 0.8 / n;
    for (j, (name, values)) in series.iter().enumerate() {
        let c = color(j);
        let rects =
            values.iter().enumerate().filter(|(_, v)| v.is_finite() && **v > 0.0).map(move |(i, &v)| {
                // Row 0 at the top.
                let top = rows - i as f64 - 0.1 - j as f64 * band;
                Rectangle::new([(lo, top - band), (v, top)], c.filled())
            });
        chart
            .draw_series(rects)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    // Row labels, right-aligned left of the plotting area.
    let style = TextStyle::from((FAMILY, 13).into_font())
        .color(&BLACK)
        .pos(text_anchor::Pos::new(text_anchor::HPos::Right, text_anchor::VPos::Center));
    for (i, name) in categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(lo, rows - i as f64 - 0.5));
        root.draw(&Text::new(name.as_str(), (x - 8, y), style.clone()))?;
    }
    Ok(())
}

fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> DrawResult<DB> {
    let (xlo, xhi) = log_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let (ylo, yhi) = log_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .x_label_formatter(&|v| compact(*v, " B"))
        .y_label_formatter(&|v| compact(*v, ""))
        .draw()?;
    for (j, s) in series.iter().enumerate() {
        let c = color(j);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels() {
        assert_eq!(compact(1000.0, " B"), "1 kB");
        assert_eq!(compact(64.0, " B"), "64 B");
        assert_eq!(compact(2_000_000.0, ""), "2M");
        assert_eq!(compact(0.1, ""), "0.1");
    }

    #[test]
    fn both_kinds_of_chart_are_written_as_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("tachyon-bench-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bars = Chart::Bars {
            file: "bars",
            title: "Round trips".into(),
            value_label: "µs".into(),
            categories: vec!["a × b".into(), "c".into()],
            series: vec![("p50".into(), vec![1.0, 50.0]), ("p99".into(), vec![2.0, 0.0])],
        };
        let lines = Chart::Lines {
            file: "lines",
            title: "vs size".into(),
            x_label: "bytes".into(),
            y_label: "µs".into(),
            series: vec![Series { name: "x".into(), points: vec![(64.0, 1.0), (1048576.0, 3.0)] }],
        };
        for chart in [bars, lines] {
            let files = write(&chart, &dir).unwrap();
            let svg = std::fs::read_to_string(dir.join(&files[0])).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("<text"), "{svg}");
            let png = std::fs::read(dir.join(&files[1])).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
