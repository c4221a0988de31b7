//! Prometheus' text exposition format, as Go's client writes it: metric families sorted by name, HELP and
//! TYPE lines, samples with labels, histograms with cumulative buckets, floats as Go formats them.

pub use kv_api::stats::Histogram;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub(crate) const GAUGE: &str = "gauge";
pub(crate) const COUNTER: &str = "counter";

/// Metric families being written; each is kept whole under its name so they come out sorted.
#[derive(Default)]
pub(crate) struct Exposition {
    families: BTreeMap<&'static str, String>,
}

/// A series' labels, in the order written (Go's client sorts them by name; callers pass them sorted).
pub(crate) type Labels<'a> = &'a [(&'a str, &'a str)];

impl Exposition {
    pub(crate) fn family(&mut self, name: &'static str, help: &str, kind: &str) -> &mut String {
        let text = self.families.entry(name).or_default();
        let _ = writeln!(text, "# HELP {name} {}", help.replace('\\', r"\\").replace('\n', r"\n"));
        let _ = writeln!(text, "# TYPE {name} {kind}");
        text
    }

    pub(crate) fn labelled(&mut self, name: &'static str, help: &str, kind: &str, series: &[(Labels<'_>, f64)]) {
        let text = self.family(name, help, kind);
        for (labels, value) in series {
            sample(text, name, labels, None, *value);
        }
    }

    pub(crate) fn histograms(&mut self, name: &'static str, help: &str, series: &[(Labels<'_>, &Histogram)]) {
        let text = self.family(name, help, "histogram");
        let (bucket, sum, count) = (format!("{name}_bucket"), format!("{name}_sum"), format!("{name}_count"));
        for (labels, histogram) in series {
            let (buckets, total) = histogram.cumulative();
            for (bound, cumulative) in &buckets {
                sample(text, &bucket, labels, Some(&go_float(*bound)), *cumulative as f64);
            }
            sample(text, &sum, labels, None, total);
            let observations = buckets.last().map_or(0, |(_, c)| *c);
            sample(text, &count, labels, None, observations as f64);
        }
    }

    pub(crate) fn finish(self) -> String {
        self.families.into_values().collect()
    }
}

fn sample(text: &mut String, name: &str, labels: Labels<'_>, le: Option<&str>, value: f64) {
    text.push_str(name);
    let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
    for (i, (label, value)) in all.enumerate() {
        text.push(if i == 0 { '{' } else { ',' });
        let escaped = value.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n");
        let _ = write!(text, "{label}=\"{escaped}\"");
    }
    if !labels.is_empty() || le.is_some() {
        text.push('}');
    }
    let _ = writeln!(text, " {}", go_float(value));
}

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it, which is what etcd's `/metrics`
/// shows: the shortest digits that read back exactly, in exponent form below 1e-4 and from 1e6 up.
pub(crate) fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let scientific = format!("{v:e}");
    let Some((mantissa, exp)) = scientific.split_once('e') else { return format!("{v}") };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return format!("{v}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}
