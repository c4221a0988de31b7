//! The report's two PNG plots, drawn with plotters:
//!
//! - `latency.png`: every completed op as a point at (invocation time, latency), latency on a log
//!   scale, colored by outcome (ok / fail / info) and shaped by `f`;
//! - `throughput.png`: completions per second over time, one line per outcome.
//!
//! Both shade the fault windows (from a nemesis `start` to its `stop`), so that a reader sees at a
//! glance what each fault did to the clients: timeouts piling up at the op timeout while the leader
//! is cut off, throughput falling to zero until a new leader is elected.
//!
//! The plots know nothing about workloads: [`Sample::from_pairs`] (in [`sample`]) reduces any
//! paired history to `f`, outcome and times, reading `f` from the payload's JSON (every workload's
//! payload is tagged with `f`, see [`crate::history`]).
//!
//! [`timeline`] draws another kind of chart, latency over time of a few named series with labelled
//! spans shaded (`jepsen bench --scale`'s writer during compaction and defrag).
//!
//! Text needs a font. Plotters is built with its pure-Rust `ab_glyph` renderer, which links no
//! system library but has no fonts of its own, so [`font`] loads one from a list of well-known
//! paths. Without one the plots are drawn without any text (no title, tick labels or legend)
//! rather than not at all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::history::OpType;
use crate::options::FaultKind;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DynElement;
use plotters::prelude::*;

mod legend;
pub mod sample;
pub mod timeline;

use legend::legend;

use sample::{bucket_width_s, throughput};
pub use sample::{f_of, fault_windows, FaultWindow, Sample};

/// The size of both images, in pixels.
const SIZE: (u32, u32) = (1200, 600);
/// Fonts tried in order: Debian/Ubuntu (`fonts-dejavu-core`, on every machine of ours), then other
/// distributions' DejaVu, Liberation, FreeFont and Noto locations.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
];
/// The font the plots write with: the first of [`font_paths`] that loads, registered with plotters
/// once per process. `None` when there is none; the plots then carry no text.
pub fn font() -> Option<&'static Path> {
    static FONT: OnceLock<Option<PathBuf>> = OnceLock::new();
    FONT.get_or_init(|| {
        let paths: Vec<PathBuf> = FONT_PATHS.iter().map(PathBuf::from).collect();
        register_first(&paths)
    })
    .as_deref()
}

/// Registers the first file among `paths` that is a usable font as plotters' `sans-serif`.
fn register_first(paths: &[PathBuf]) -> Option<PathBuf> {
    for path in paths {
        let Ok(bytes) = std::fs::read(path) else { continue };
        // Plotters keeps registered fonts for the life of the process and wants them `'static`;
        // this runs once per process (see `font`), so the leak is one font file.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
            return Some(path.clone());
        }
    }
    None
}

/// The places [`font`] looks, for a note when it finds nothing.
pub fn font_paths() -> &'static [&'static str] {
    FONT_PATHS
}

/// What both plots show.
#[derive(Clone, Copy, Debug)]
pub struct Plot<'a> {
    /// The title (the run's name).
    pub title: &'a str,
    pub samples: &'a [Sample],
    pub windows: &'a [FaultWindow],
    /// The end of the time axis.
    pub end_ns: u64,
    /// Whether to draw text; only with a registered font (see [`font`]).
    pub text: bool,
}

impl Plot<'_> {
    /// Draws `latency.png`.
    pub fn latency(&self, path: &Path) -> Result<()> {
        let area = BitMapBackend::new(path, SIZE).into_drawing_area();
        area.fill(&WHITE).map_err(failed(path))?;
        self.draw_latency(&area).map_err(failed(path))?;
        area.present().map_err(failed(path))
    }

    /// Draws `throughput.png`.
    pub fn throughput(&self, path: &Path) -> Result<()> {
        let area = BitMapBackend::new(path, SIZE).into_drawing_area();
        area.fill(&WHITE).map_err(failed(path))?;
        self.draw_throughput(&area).map_err(failed(path))?;
        area.present().map_err(failed(path))
    }

    fn x_max(&self) -> f64 {
        (self.end_ns as f64 / 1e9).max(1.0)
    }

    fn draw_latency<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (y_min, y_max) = latency_range(self.samples);
        let mut builder = self.builder(area, "latency");
        let mut chart = builder.build_cartesian_2d(0.0..self.x_max(), (y_min..y_max).log_scale())?;
        self.mesh(&mut chart, "latency (ms, log scale)")?;
        self.shade(&mut chart, y_min, y_max)?;
        let fs = distinct_fs(self.samples);
        for outcome in [OpType::Ok, OpType::Fail, OpType::Info] {
            let color = outcome_color(outcome);
            let points = self.samples.iter().filter(|s| s.outcome == outcome).map(|s| {
                let at = (s.start_ns as f64 / 1e9, s.latency_ms().max(y_min));
                marker(fs[s.f.as_str()], at, color)
            });
            chart.draw_series(points)?;
        }
        if !self.text {
            return Ok(());
        }
        // The legend names shapes and colors separately: `f` count + 3 entries, not their product.
        let mut shapes: Vec<(&str, usize)> = fs.iter().map(|(f, shape)| (*f, *shape)).collect();
        shapes.sort_by_key(|(_, shape)| *shape);
        for (f, shape) in shapes {
            let anno = chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?;
            anno.label(f).legend(move |at| marker(shape, at, RGBColor(60, 60, 60)));
        }
        for outcome in self.present_outcomes() {
            let color = outcome_color(outcome);
            let anno = chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?;
            anno.label(outcome_name(outcome)).legend(move |at| Circle::new(at, 4, color.filled()));
        }
        legend(&mut chart)
    }

    fn draw_throughput<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let width_s = bucket_width_s(self.end_ns);
        let lines = throughput(self.samples, self.end_ns, width_s);
        let y_max = lines.iter().flat_map(|(_, points)| points.iter().map(|p| p.1)).fold(1.0, f64::max) * 1.15;
        let mut builder = self.builder(area, "throughput");
        let mut chart = builder.build_cartesian_2d(0.0..self.x_max(), 0.0..y_max)?;
        let y_desc = if width_s == 1 {
            "completed ops per second".to_string()
        } else {
            format!("completed ops per second ({width_s} s buckets)")
        };
        self.mesh(&mut chart, &y_desc)?;
        self.shade(&mut chart, 0.0, y_max)?;
        for (outcome, points) in lines {
            let color = outcome_color(outcome);
            let anno = chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
            if self.text {
                anno.label(outcome_name(outcome))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            }
        }
        if self.text {
            legend(&mut chart)?;
        }
        Ok(())
    }

    /// A chart builder with the title and room for tick labels, or neither without text.
    fn builder<'a, 'b, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
        what: &str,
    ) -> ChartBuilder<'a, 'b, DB> {
        let mut builder = ChartBuilder::on(area);
        builder.margin(16);
        if self.text {
            builder
                .caption(format!("{}: {what}", self.title), ("sans-serif", 20))
                .x_label_area_size(44)
                .y_label_area_size(70);
        }
        builder
    }

    /// The grid, the axis labels and their descriptions.
    fn mesh<DB: DrawingBackend, Y>(&self, chart: &mut Chart<'_, DB, Y>, y_desc: &str) -> DrawResult<DB>
    where
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(RGBColor(235, 235, 235)).bold_line_style(RGBColor(210, 210, 210));
        if self.text {
            mesh.x_desc("time since the start of the run (s)")
                .y_desc(y_desc)
                .label_style(("sans-serif", 14))
                .x_label_formatter(&tick)
                .y_label_formatter(&tick);
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw()
    }

    /// Shades every fault window from `y_min` to `y_max`, one legend entry per fault kind.
    fn shade<DB: DrawingBackend, Y>(&self, chart: &mut Chart<'_, DB, Y>, y_min: f64, y_max: f64) -> DrawResult<DB>
    where
        Y: Ranged<ValueType = f64>,
    {
        let mut kinds: Vec<FaultKind> = Vec::new();
        for window in self.windows {
            if !kinds.contains(&window.fault) {
                kinds.push(window.fault);
            }
        }
        for kind in kinds {
            let color = fault_color(kind);
            let rects = self.windows.iter().filter(|w| w.fault == kind).map(|w| {
                let (start, end) = (w.start_ns as f64 / 1e9, w.end_ns as f64 / 1e9);
                Rectangle::new([(start, y_min), (end, y_max)], color.mix(0.2).filled())
            });
            let anno = chart.draw_series(rects)?;
            if self.text {
                anno.label(kind.name())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.mix(0.35).filled()));
            }
        }
        Ok(())
    }

    fn present_outcomes(&self) -> Vec<OpType> {
        [OpType::Ok, OpType::Fail, OpType::Info]
            .into_iter()
            .filter(|o| self.samples.iter().any(|s| s.outcome == *o))
            .collect()
    }
}

/// Plotters' drawing errors as the crate's error: the PNG could not be written.
fn failed<E: std::error::Error + Send + Sync + 'static>(path: &Path) -> impl FnOnce(DrawingAreaErrorKind<E>) -> Error {
    let what = format!("draw {}", path.display());
    move |err| Error::System { what, source: std::io::Error::other(err.to_string()) }
}

type Chart<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;
type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A tick label: `10`, not `10.0`; `0.25`, not `0.25000000000000006`.
fn tick(value: &f64) -> String {
    let rounded = (value * 1e6).round() / 1e6;
    format!("{rounded}")
}

/// Each distinct `f` and its marker shape, in order of first appearance.
fn distinct_fs(samples: &[Sample]) -> HashMap<&str, usize> {
    let mut fs = HashMap::new();
    for sample in samples {
        let next = fs.len();
        fs.entry(sample.f.as_str()).or_insert(next);
    }
    fs
}

/// The latency axis: whole powers of ten around every sample's latency.
fn latency_range(samples: &[Sample]) -> (f64, f64) {
    // Sub-microsecond latencies are clock noise; a floor keeps log10 finite.
    let latencies = samples.iter().map(|s| s.latency_ms().max(0.001));
    let (min, max) = latencies.fold((f64::MAX, 0.0f64), |(lo, hi), l| (lo.min(l), hi.max(l)));
    if max == 0.0 {
        return (0.1, 10.0);
    }
    let lo = 10f64.powf(min.log10().floor());
    let hi = 10f64.powf(max.log10().ceil()).max(lo * 10.0);
    (lo, hi)
}

/// A point marker: filled circle, triangle, cross, hollow circle, hollow triangle, then round
/// again. (Pixel-sized shapes only: composed ones would tie the marker to the backend's lifetime.)
fn marker<'a, DB: DrawingBackend, C: Clone + 'static>(shape: usize, at: C, color: RGBColor) -> DynElement<'a, DB, C> {
    let style = color.mix(0.75);
    match shape % 5 {
        0 => Circle::new(at, 3, style.filled()).into_dyn(),
        1 => TriangleMarker::new(at, 4, style.filled()).into_dyn(),
        2 => Cross::new(at, 3, style.stroke_width(2)).into_dyn(),
        3 => Circle::new(at, 3, style.stroke_width(1)).into_dyn(),
        _ => TriangleMarker::new(at, 4, style.stroke_width(1)).into_dyn(),
    }
}

fn outcome_name(outcome: OpType) -> &'static str {
    match outcome {
        OpType::Ok => "ok",
        OpType::Fail => "fail",
        OpType::Info => "info",
        OpType::Invoke => "invoke",
    }
}

/// Jepsen's habit: ok blue, fail red, info (indeterminate) orange.
fn outcome_color(outcome: OpType) -> RGBColor {
    match outcome {
        OpType::Ok => RGBColor(31, 119, 180),
        OpType::Fail => RGBColor(214, 39, 40),
        OpType::Info | OpType::Invoke => RGBColor(255, 127, 14),
    }
}

/// One color per fault kind, the same in every report (by the kind's place in [`FaultKind`]).
fn fault_color(kind: FaultKind) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(127, 127, 127),
        RGBColor(148, 103, 189),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
        RGBColor(140, 86, 75),
        RGBColor(188, 189, 34),
        RGBColor(44, 160, 44),
        RGBColor(174, 199, 232),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
    ];
    PALETTE[kind as usize % PALETTE.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::NemesisEvent;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn event(time_ns: u64, f: &'static str, fault: FaultKind) -> NemesisEvent {
        NemesisEvent { time_ns, f, fault, detail: format!("{f} {}", fault.name()) }
    }

    #[test]
    fn latency_axis_spans_whole_decades() {
        let sample =
            |latency_ns| Sample { f: "read".to_string(), outcome: OpType::Ok, start_ns: 0, end_ns: latency_ns };
        assert_eq!(latency_range(&[sample(3 * MS), sample(2000 * MS)]), (1.0, 10_000.0));
        assert_eq!(latency_range(&[sample(MS)]), (1.0, 10.0));
        assert_eq!(latency_range(&[sample(0)]), (0.001, 0.01), "zero latency is clamped");
        assert_eq!(latency_range(&[]), (0.1, 10.0));
    }

    #[test]
    fn ticks_are_short() {
        let cases = [(10.0, "10"), (0.25000000000000006, "0.25"), (0.001, "0.001"), (12.5, "12.5"), (1e4, "10000")];
        for (value, want) in cases {
            assert_eq!(tick(&value), want);
        }
    }

    #[test]
    fn font_loading_skips_missing_and_broken_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broken = dir.path().join("broken.ttf");
        std::fs::write(&broken, b"not a font").expect("write");
        assert_eq!(register_first(&[dir.path().join("missing.ttf"), broken]), None);
    }

    /// A minute of synthetic history: steady reads and writes, a fault window with timeouts.
    fn synthetic() -> (Vec<Sample>, Vec<FaultWindow>) {
        let mut samples = Vec::new();
        for i in 0..600u64 {
            let start_ns = i * 100 * MS;
            let in_fault = (20 * S..30 * S).contains(&start_ns);
            let (outcome, latency) = match (in_fault, i % 7) {
                (true, 0) => (OpType::Fail, 5 * MS),
                (true, _) => (OpType::Info, 2000 * MS),
                (false, _) => (OpType::Ok, (1 + i % 13) * MS),
            };
            let f = if i % 3 == 0 { "write" } else { "read" };
            samples.push(Sample { f: f.to_string(), outcome, start_ns, end_ns: start_ns + latency });
        }
        let events = vec![
            event(20 * S, "start", FaultKind::PartitionLeader),
            event(30 * S, "stop", FaultKind::PartitionLeader),
            event(40 * S, "start", FaultKind::KillOne),
            event(45 * S, "stop", FaultKind::None),
        ];
        (samples, fault_windows(&events, 62 * S))
    }

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert!(bytes.len() > 1000, "{} is only {} bytes", path.display(), bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    }

    #[test]
    fn plots_are_written_with_and_without_text() {
        let (samples, windows) = synthetic();
        let dir = tempfile::tempdir().expect("tempdir");
        // Without a font on this machine only the text-less variant can be drawn.
        let variants: &[bool] = if font().is_some() { &[false, true] } else { &[false] };
        for &text in variants {
            let plot = Plot { title: "test-run", samples: &samples, windows: &windows, end_ns: 62 * S, text };
            let latency = dir.path().join(format!("latency-{text}.png"));
            let throughput = dir.path().join(format!("throughput-{text}.png"));
            plot.latency(&latency).expect("draw latency");
            plot.throughput(&throughput).expect("draw throughput");
            assert_png(&latency);
            assert_png(&throughput);
        }
    }

    #[test]
    fn an_empty_history_still_plots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plot = Plot { title: "empty", samples: &[], windows: &[], end_ns: 0, text: font().is_some() };
        plot.latency(&dir.path().join("latency.png")).expect("draw latency");
        plot.throughput(&dir.path().join("throughput.png")).expect("draw throughput");
        assert_png(&dir.path().join("latency.png"));
    }

    #[test]
    fn unwritable_path_is_an_error_not_a_panic() {
        let plot = Plot { title: "t", samples: &[], windows: &[], end_ns: S, text: false };
        assert!(plot.latency(Path::new("/nonexistent-dir/latency.png")).is_err());
    }
}
