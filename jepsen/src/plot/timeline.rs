//! A latency-over-time chart (one point per request, at the time it was sent) of a few named series (one per target, say) with labelled time spans
//! shaded behind them (compaction, defragmentation), as a PNG: `jepsen bench --scale` draws its
//! concurrent writer's puts with it. It knows nothing of benchmarks: series are points (seconds,
//! milliseconds), spans are labels with a start and an end.
//!
//! Text needs the font [`super::font`] registers; the caller says whether there is one.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Error, Result};

/// The image's size, in pixels.
const SIZE: (u32, u32) = (1200, 600);
/// Series colors, in order (blue and orange, as the report's other plots).
const SERIES_COLORS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
/// Span colors, in order of first appearance of a label.
const SPAN_COLORS: [RGBColor; 4] =
    [RGBColor(214, 39, 40), RGBColor(127, 127, 127), RGBColor(188, 189, 34), RGBColor(23, 190, 207)];

/// One line of points: (seconds since the start, latency in milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A shaded span of time, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub label: String,
    pub start: f64,
    pub end: f64,
}

/// What the chart shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub title: String,
    pub series: Vec<Series>,
    pub spans: Vec<Span>,
    /// Whether to draw text (only with a registered font).
    pub text: bool,
}

impl Timeline {
    /// Draws the chart into the PNG at `path`.
    pub fn draw(&self, path: &Path) -> Result<()> {
        let failed = |err: String| Error::System {
            what: format!("draw {}", path.display()),
            source: std::io::Error::other(err),
        };
        let area = BitMapBackend::new(path, SIZE).into_drawing_area();
        area.fill(&WHITE).map_err(|e| failed(e.to_string()))?;
        self.draw_on(&area).map_err(|e| failed(e.to_string()))?;
        area.present().map_err(|e| failed(e.to_string()))
    }

    fn draw_on<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let x_max = self.x_max();
        let (y_min, y_max) = self.y_range();
        let mut builder = ChartBuilder::on(area);
        builder.margin(16);
        if self.text {
            builder.caption(&self.title, ("sans-serif", 20)).x_label_area_size(44).y_label_area_size(70);
        }
        let mut chart = builder.build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())?;
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(RGBColor(235, 235, 235)).bold_line_style(RGBColor(210, 210, 210));
        if self.text {
            mesh.x_desc("seconds since the writer started")
                .y_desc("put latency (ms, log scale)")
                .label_style(("sans-serif", 14))
                .x_label_formatter(&tick)
                .y_label_formatter(&tick);
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw()?;
        let mut labels: Vec<&str> = Vec::new();
        for span in &self.spans {
            if !labels.contains(&span.label.as_str()) {
                labels.push(&span.label);
            }
        }
        for (i, label) in labels.iter().enumerate() {
            let color = SPAN_COLORS[i % SPAN_COLORS.len()];
            let rects = self.spans.iter().filter(|s| s.label == *label).map(|s| {
                // A span shorter than a pixel would vanish; a minimal width keeps it visible.
                let end = s.end.max(s.start + x_max / 1000.0);
                Rectangle::new([(s.start, y_min), (end, y_max)], color.mix(0.18).filled())
            });
            let anno = chart.draw_series(rects)?;
            if self.text {
                anno.label(*label)
                    .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.mix(0.4).filled()));
            }
        }
        for (i, series) in self.series.iter().enumerate() {
            let color = SERIES_COLORS[i % SERIES_COLORS.len()];
            // Points, not a line: a line from a put that took seconds to the next one would draw
            // a slope where no put was.
            let points = series.points.iter().map(|&(x, y)| Circle::new((x, y.max(y_min)), 2, color.mix(0.6).filled()));
            let anno = chart.draw_series(points)?;
            if self.text {
                anno.label(series.name.as_str()).legend(move |at| Circle::new(at, 4, color.filled()));
            }
        }
        if self.text {
            super::legend::legend(&mut chart)?;
        }
        Ok(())
    }

    fn x_max(&self) -> f64 {
        let points = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        points.chain(self.spans.iter().map(|s| s.end)).fold(1.0, f64::max)
    }

    /// Whole decades around every latency (a floor of 1 µs keeps the logarithm finite).
    fn y_range(&self) -> (f64, f64) {
        let latencies = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.1.max(0.001)));
        let (min, max) = latencies.fold((f64::MAX, 0.0f64), |(lo, hi), l| (lo.min(l), hi.max(l)));
        if max == 0.0 {
            return (0.1, 10.0);
        }
        let lo = 10f64.powf(min.log10().floor());
        (lo, 10f64.powf(max.log10().ceil()).max(lo * 10.0))
    }
}

/// A tick label: `10`, not `10.0`; `0.25`, not `0.25000000000000006`.
fn tick(value: &f64) -> String {
    let rounded = (value * 1e6).round() / 1e6;
    format!("{rounded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(text: bool) -> Timeline {
        let series = |name: &str, slow: f64| Series {
            name: name.to_string(),
            points: (0..200).map(|i| (f64::from(i) * 0.05, if (80..120).contains(&i) { slow } else { 2.0 })).collect(),
        };
        let span = |label: &str, start, end| Span { label: label.to_string(), start, end };
        Timeline {
            title: "writer".into(),
            series: vec![series("etcd", 40.0), series("ours", 900.0)],
            spans: vec![
                span("etcd compaction", 4.0, 4.001),
                span("ours compaction", 4.0, 6.0),
                span("ours defrag", 7.0, 8.0),
            ],
            text,
        }
    }

    #[test]
    fn axes_cover_every_point_and_span() {
        let t = timeline(false);
        assert_eq!(t.y_range(), (1.0, 1000.0));
        assert!((t.x_max() - 9.95).abs() < 1e-9);
        let empty = Timeline { title: String::new(), series: Vec::new(), spans: Vec::new(), text: false };
        assert_eq!((empty.y_range(), empty.x_max()), ((0.1, 10.0), 1.0));
    }

    #[test]
    fn the_chart_is_a_png_with_and_without_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let variants: &[bool] = if super::super::font().is_some() { &[false, true] } else { &[false] };
        for &text in variants {
            let path = dir.path().join(format!("timeline-{text}.png"));
            timeline(text).draw(&path).expect("draws");
            let bytes = std::fs::read(&path).expect("read");
            assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG"), "{} bytes", bytes.len());
        }
        assert!(timeline(false).draw(Path::new("/nonexistent-dir/t.png")).is_err());
    }
}
